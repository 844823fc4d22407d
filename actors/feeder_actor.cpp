// Feeder actor: turns a step into microbatches (inputs to the first virtual stage, targets to
// the last), from the deterministic token source. Every process has one and feeds its own
// chunks: the source is a function of (step, microbatch), so no tokens cross processes.
#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/data/microbatch.hpp"

namespace actorpipe {

caf::behavior feeder_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx) {
  return {
      [=](msg::start_step& s) {
        const auto& o = ctx->options;
        if (!ctx->is_local_stage(0) && !ctx->is_local_stage(ctx->stages - 1)) return;
        for (int m = 0; m < ctx->microbatches; ++m) {
          microbatch_tensors mt;
          try {
            mt = make_microbatch(*ctx->source, static_cast<std::uint64_t>(s.step), m, o.microbatch_size,
                                 o.model.seq_len);
          } catch (const std::exception& e) {
            self->send(ctx->supervisor, msg::failure{std::string("feeder: ") + e.what()});
            return;
          }
          if (ctx->is_local_stage(ctx->stages - 1)) self->send(ctx->chunks.back(), msg::targets{s.step, m, std::move(mt.targets)});
          if (ctx->is_local_stage(0)) self->send(ctx->chunks.front(), msg::activation{s.step, 0, m, std::move(mt.inputs)});
        }
      },
  };
}

}  // namespace actorpipe
