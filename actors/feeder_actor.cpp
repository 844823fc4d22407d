// Feeder actor: turns a step into microbatches (inputs to the first virtual stage, targets to
// the last), from the model's deterministic data. Every process has one and feeds its own
// chunks: the data is a function of (step, microbatch), so no samples cross processes.
// Replica d takes microbatches d*M .. d*M+M-1 of the step, so D replicas of M microbatches
// cover the samples one pipeline of D*M would.
#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/data/microbatch.hpp"

namespace actorpipe {

caf::behavior feeder_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx) {
  return {
      [=](msg::start_step& s) {
        const int M = ctx->microbatches, last = ctx->virtual_stages - 1;
        for (int d = 0; d < ctx->replicas; ++d) {
          const int first_id = ctx->stage_id(d, 0), last_id = ctx->stage_id(d, last);
          const bool feeds_first = ctx->is_local_stage(first_id), feeds_last = ctx->is_local_stage(last_id);
          for (int m = 0; m < M && (feeds_first || feeds_last); ++m) {
            microbatch_tensors mt;
            try {
              mt = ctx->batches(static_cast<std::uint64_t>(s.step), d * M + m);
            } catch (const std::exception& e) {
              self->send(ctx->supervisor, msg::failure{std::string("feeder: ") + e.what()});
              return;
            }
            if (feeds_last) self->send(ctx->chunk_actors[last_id], msg::targets{s.step, m, std::move(mt.targets)});
            if (feeds_first) self->send(ctx->chunk_actors[first_id], msg::activation{s.step, first_id, m, std::move(mt.inputs)});
          }
        }
      },
  };
}

}  // namespace actorpipe
