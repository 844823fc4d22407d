// Optimizer actor: one per rank (the shard actor once data parallelism lands). Computes the
// rank's gradient norm parts and steps AdamW for the rank's virtual stages, on the rank's
// compute thread.
#include "actors/messages.hpp"
#include "actors/run_context.hpp"

namespace actorpipe {

caf::behavior optimizer_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int rank) {
  const std::vector<int> mine = ctx->place.virtual_stages_of(rank);
  return {
      [=](msg::grad_norm_request& r) {
        auto sup = ctx->supervisor;
        const int step = r.step;
        self->send(ctx->compute[rank], msg::compute_job{[ctx, mine, sup, step, rank] {
                     msg::grad_sq_parts parts{step, rank, {}};
                     for (int v : mine) {
                       // Tied copies are counted once, where they are owned.
                       parts.per_stage.push_back({v, ctx->optimizers[v]->grad_sq_sum(ctx->runners[v]->tied_copies())});
                     }
                     caf::anon_send(sup, std::move(parts));
                   }});
      },
      [=](msg::optimizer_step& s) {
        auto sup = ctx->supervisor;
        self->send(ctx->compute[rank], msg::compute_job{[ctx, mine, sup, s, rank] {
                     std::string error;
                     try {
                       for (int v : mine) {
                         auto& opt = *ctx->optimizers[v];
                         if (s.clip_coefficient < 1.0) opt.scale_grads(s.clip_coefficient);
                         opt.step(s.lr);
                         opt.zero_grad();
                       }
                     } catch (const std::exception& e) {
                       error = e.what();
                     }
                     if (!error.empty())
                       caf::anon_send(sup, msg::failure{"rank " + std::to_string(rank) + ": optimizer step failed: " + error});
                     else
                       caf::anon_send(sup, msg::optimizer_done{s.step, rank});
                   }});
      },
  };
}

}  // namespace actorpipe
