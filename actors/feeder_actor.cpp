// Feeder actor: turns a step into microbatches (inputs to the first virtual stage, targets to
// the last), from the model's deterministic data. Every process has one and feeds its own
// chunks: the data is a function of (step, microbatch), so no samples cross processes.
// Replica d takes microbatches d*M .. d*M+M-1 of the step, so D replicas of M microbatches
// cover the samples one pipeline of D*M would. Eval rounds are fed the same way from the eval
// data.
#include <algorithm>
#include <functional>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/data/microbatch.hpp"
#include "core/model/chunk_compute.hpp"
#include "core/model/error_text.hpp"

namespace actorpipe {

namespace {

// Feeds step `step` (a training step, or an eval round) to this process's first and last
// chunks of every replica: microbatch m of replica d is data(d * M + m).
// `first`: the index of this step's microbatch 0 in what `data` is asked for (an evaluation
// round's), for messages.
void feed(caf::event_based_actor* self, const run_context& ctx, int step,
          const std::function<microbatch_tensors(int)>& data, int first = 0) {
  const int M = ctx.microbatches, last = ctx.virtual_stages - 1;
  for (int d = 0; d < ctx.replicas; ++d) {
    const int first_id = ctx.stage_id(d, 0), last_id = ctx.stage_id(d, last);
    const bool feeds_first = ctx.is_local_stage(first_id), feeds_last = ctx.is_local_stage(last_id);
    for (int m = 0; m < M && (feeds_first || feeds_last); ++m) {
      microbatch_tensors mt;
      std::string why;
      bool certain = false;  // a certain_failure: every run would fail so
      try {
        mt = data(d * M + m);
      } catch (const std::exception& e) {
        why = error_text(e);
        certain = dynamic_cast<const certain_failure*>(&e) != nullptr;
      } catch (...) {
        why = "an exception that is not a std::exception";
      }
      if (!why.empty()) {
        const std::string which = run_context::is_eval_step(step)
                                      ? "evaluation microbatch " + std::to_string(first + d * M + m)
                                      : "step " + std::to_string(step + 1) + ", microbatch " + std::to_string(d * M + m);
        self->send(ctx.supervisor, msg::failure{"feeder: " + why + " (the data of " + which + ")", -1, false, certain});
        return;
      }
      if (feeds_last) self->send(ctx.chunk_actors[last_id], msg::targets{step, m, std::move(mt.targets)});
      if (feeds_first) self->send(ctx.chunk_actors[first_id], msg::activation{step, first_id, m, std::move(mt.inputs)});
    }
  }
}

}  // namespace

caf::behavior feeder_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx) {
  return {
      [=](msg::start_step& s) {
        feed(self, *ctx, s.step, [&](int i) { return ctx->batches(static_cast<std::uint64_t>(s.step), i); });
      },
      [=](msg::start_eval& e) {
        // The last round fills its M x D microbatches past the eval set's end with copies of its
        // last one (eval_data is asked only for [0, eval_microbatches)); their outputs are left.
        const int first = e.round * ctx->microbatches * ctx->replicas;
        feed(self, *ctx, e.step,
             [&](int i) { return ctx->eval_batches(0, std::min(first + i, ctx->eval_microbatches - 1)); }, first);
      },
  };
}

}  // namespace actorpipe
