// One virtual stage's optimizer on one replica of a data-parallel job (D > 1). Its gradients
// leave as flat buckets (core/optim/flat_layout.hpp); it reduces slice `replica` of every
// bucket (its shard) over the D replicas, in replica order, so the bits never depend on which
// replica's slice arrived first. ZeRO-1 keeps AdamW state for that shard only, steps it and
// hands the updated parameter slices to the other replicas; ZeRO-0 gathers every reduced
// slice and steps the whole stage on every replica. Both step shard by shard with the same
// runs of elements, so they give the same bits. Touch it on its rank's compute thread only.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/model/tensor_box.hpp"
#include "core/optim/flat_layout.hpp"
#include "core/optim/optimizer.hpp"

namespace actorpipe {

class data_parallel_optimizer {
 public:
  // params: the stage's named parameters on this replica (they share storage with its
  // modules); skip_in_norm: parameters the gradient norm leaves out (tied copies).
  data_parallel_optimizer(std::vector<std::pair<std::string, tensor_box>> params, flat_layout layout, int replica,
                          int zero_stage, const adamw_options& options, std::vector<std::string> skip_in_norm);
  ~data_parallel_optimizer();
  data_parallel_optimizer(const data_parallel_optimizer&) = delete;
  data_parallel_optimizer& operator=(const data_parallel_optimizer&) = delete;

  const flat_layout& layout() const;
  int replica() const;
  int zero_stage() const;
  // Bucket b of this replica's gradients as it travels (a new tensor): D slices, each its
  // slice_length(b) elements (a parameter without a gradient counts as zeros, padding is
  // zeros) followed by one flag per parameter of the bucket, in layout order: 1 where this
  // replica has a gradient for it, 0 where not. reduce() reads the flags, so a parameter no
  // replica has a gradient for is not stepped (as shard_optimizer leaves it).
  tensor_box gradient_bucket(int b) const;
  // Buckets that may leave before the step's last backward ends. Parameter p just had a
  // contribution accumulated, during its stage's last backward action of the step or before
  // it (`last_pass`): the buckets that are complete because of it, each once per step. A
  // bucket is complete once each of its parameters has had, in the last pass, as many
  // contributions as in the first step's last pass (the first step sends every bucket at its
  // end, and counts), and none is in `late` (tied parameters: their gradients change again in
  // the tied sum). A parameter the last pass does not touch completes at the step's end only:
  // how often the passes before it use a parameter may differ from step to step (a layer used
  // by some microbatches and not others), the last pass's own count does not for a given layer.
  std::vector<int> gradient_accumulated(int p, bool last_pass);
  void set_late_parameters(const std::vector<tensor_box>& late);
  // The buckets not handed out yet this step (all of them in the first); starts the next step.
  std::vector<int> take_remaining_buckets();
  int step_index() const;  // steps taken so far: the current step's number
  void set_step_index(long long steps);  // a resumed run's: the step its checkpoint holds
  // Slice `shard` of a travelling bucket from gradient_bucket (a view, flags included).
  tensor_box slice(const tensor_box& bucket, int b, int shard) const;
  // This replica's slice of bucket b, reduced: by_replica[0] + by_replica[1] + ... in order
  // (each a travelling slice); and which of the bucket's parameters some replica had a
  // gradient for, kept for this step's step().
  void reduce(int b, const std::vector<tensor_box>& by_replica);
  // This replica's slice of bucket b, once reduced: a copy, which stays as it is while it
  // travels, whatever this replica writes to its own buffers next.
  tensor_box reduced_slice(int b) const;
  // ZeRO-0: another shard's reduced slice of bucket b.
  void set_reduced_slice(int shard, int b, const tensor_box& slice);
  // Sum of squares of this replica's reduced shard, in double, segment by segment (the
  // parameters in skip_in_norm left out).
  double grad_sq_sum() const;
  // One AdamW update of every shard this replica holds state for (its own under ZeRO-1, all
  // under ZeRO-0), the reduced gradients scaled by `clip` when it is < 1 as the update reads
  // them (adamw_update's grad_scale; the buffer itself is left as it is). Only parameters
  // some replica had a gradient for are updated, each with its own update count.
  void step(double clip, double lr);
  // ZeRO-1: this replica's updated parameters of bucket b's slice, padded (a new tensor), and
  // the writing of another shard's into this replica's parameters.
  tensor_box parameter_slice(int b) const;
  void set_parameter_slice(int shard, int b, const tensor_box& slice);
  // The modules' own gradients to zero, for the next step's backward.
  void zero_grad();
  // The first parameter whose part this replica updates (its shard under ZeRO-1) holds a value
  // that is not finite, "" if none.
  std::string nonfinite_parameter() const;
  long long state_bytes() const;  // AdamW moments held here
  // The moments of this replica's own shard, by parameter name and offset (copies; padding
  // left out; under ZeRO-0 the other shards' are the other replicas' to export, so the D
  // replicas' runs are disjoint), each with its parameter's update count, and loading every
  // shard held here from runs of any layout (std::invalid_argument naming a parameter whose
  // runs leave a gap or disagree on the step count); the step index becomes the most updates
  // a parameter held here has had (set_step_index says it where that is not the run's step).
  std::vector<moment_segment> export_moments() const;
  void import_moments(const std::vector<moment_segment>& runs);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace actorpipe
