// A user's model for the tests, built only through the public model API: an MLP with a tied
// pair of layers (one module used at two depths) on a synthetic regression task.
// Layers: in, h0, tied_a, h1, h2, h3, tied_b, out (tied_a and tied_b share the key "shared").
#pragma once

#include <map>
#include <string>

#include "core/model/layer_model.hpp"

namespace actorpipe::testing {

struct mlp_options {
  int features = 16;  // input and output width
  int width = 32;     // hidden width
  bool tied = true;   // tied_a / tied_b share one module (else two of their own)
  // Known unequal costs (the profile partition's test): hidden layer name -> how many times
  // it runs its matmul (same result, more time).
  std::map<std::string, int> heavy;
  // tied_b declares a build of another shape than tied_a's (the tie-shape error's test).
  bool mismatched_tie = false;
  // "in" normalises its output with a BatchNorm1d (buffers: running_mean, running_var,
  // num_batches_tracked) before its tanh.
  bool batch_norm = false;
};

model_definition mlp_model(const train_options& options, const mlp_options& m = {});

// A linear layer (width to width, then tanh) that counts its training forwards in a buffer
// "count": with add_ (which bumps the tensor's version), or through .data() (PyTorch's
// `self.buf.data.add_`, which does not), from its from_call-th training forward on.
layer_module counting_linear_module(int width, bool through_data = false, int from_call = 1);

}  // namespace actorpipe::testing
