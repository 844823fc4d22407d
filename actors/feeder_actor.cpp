// Feeder actor: turns a step into microbatches (inputs to the first virtual stage, targets to
// the last), from the model's deterministic data. Every process has one and feeds its own
// chunks: the data is a function of (step, microbatch), so no samples cross processes.
#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/data/microbatch.hpp"

namespace actorpipe {

caf::behavior feeder_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx) {
  return {
      [=](msg::start_step& s) {
        if (!ctx->is_local_stage(0) && !ctx->is_local_stage(ctx->virtual_stages - 1)) return;
        for (int m = 0; m < ctx->microbatches; ++m) {
          microbatch_tensors mt;
          try {
            mt = ctx->batches(static_cast<std::uint64_t>(s.step), m);
          } catch (const std::exception& e) {
            self->send(ctx->supervisor, msg::failure{std::string("feeder: ") + e.what()});
            return;
          }
          if (ctx->is_local_stage(ctx->virtual_stages - 1)) self->send(ctx->chunk_actors.back(), msg::targets{s.step, m, std::move(mt.targets)});
          if (ctx->is_local_stage(0)) self->send(ctx->chunk_actors.front(), msg::activation{s.step, 0, m, std::move(mt.inputs)});
        }
      },
  };
}

}  // namespace actorpipe
