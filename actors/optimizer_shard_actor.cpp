// Optimizer-shard actor: one per (virtual stage, replica). Once its chunk has run the last
// backward of the step, it takes the stage's gradients through the step:
// - one replica (D = 1): their sum of squares to the supervisor; on optimizer_step, AdamW
//   (shard_optimizer, the clip coefficient applied as it reads the gradients), zero.
// - D replicas: the gradients leave in buckets, slice j of each to the shard of replica j;
//   this shard reduces its slice of every bucket over the replicas (in replica order, as the
//   slices arrive, bucket by bucket, while other stages still compute), reports the norm of
//   its shard, and on optimizer_step steps: under ZeRO-1 its own shard, whose new parameters
//   it hands to the other replicas; under ZeRO-0 the whole stage, from every shard's reduced
//   slices, which it gathered as they were reduced.
// For a checkpoint (save_state) it snapshots its stage's state (core/train/run_state.hpp) on
// the compute thread and writes it on a thread of its own.
// All tensor work runs on the rank's compute thread; this actor keeps the count.
#include <algorithm>
#include <filesystem>
#include <map>
#include <thread>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/checkpoint/checkpoint_store.hpp"
#include "core/model/error_text.hpp"
#include "core/model/safetensors.hpp"
#include "core/train/run_state.hpp"

namespace actorpipe {
namespace {

enum work : int { sent = 0, reduced = 1, norm = 2, gathered = 3, stepped = 4, sent_early = 5 };

// Compute thread: bucket b of stage id's gradients, slice j to the shard of replica j.
void send_gradient_bucket(const run_context& ctx, int id, int step, int b) {
  auto& opt = *ctx.dp_optimizers[id];
  const tensor_box bucket = opt.gradient_bucket(b);
  for (int j = 0; j < ctx.replicas; ++j)
    ctx.send_tensor(tensor_kind::gradient_slice, step, ctx.stage_id(j, ctx.pipeline_stage(id)), b, ctx.rank_of_stage(id),
                    opt.slice(bucket, b, j));
}

// Compute thread, once: the chunk tells the optimizer of every accumulated gradient, so a
// bucket whose gradients are final leaves during the step's last backward. Tied parameters
// wait: the tied sum changes them after it.
// Compute thread: stage id's state as named tensors (copies): its parameters where it is
// replica 0's, and the AdamW moments it holds (run_state.hpp).
named_tensors snapshot_of(const run_context& ctx, int id) {
  run_state_view one;
  one.runners = {ctx.runners[id]};
  one.optimizers = {ctx.optimizers.empty() ? nullptr : ctx.optimizers[id]};
  one.dp_optimizers = {ctx.dp_optimizers.empty() ? nullptr : ctx.dp_optimizers[id]};
  one.virtual_stages = ctx.replica_of_stage(id) == 0 ? 1 : 0;
  named_tensors all = parameter_tensors(one);
  for (auto& t : replica_buffer_tensors(*ctx.runners[id], ctx.replica_of_stage(id))) all.push_back(std::move(t));
  for (auto& t : optimizer_tensors(one)) all.push_back(std::move(t));
  return all;
}

void listen_for_final_buckets(const std::shared_ptr<const run_context>& ctx, int id) {
  auto& opt = *ctx->dp_optimizers[id];
  std::vector<tensor_box> late;
  for (const auto& g : ctx->ties)
    for (auto& t : ctx->runners[id]->tied_parameters(g.key)) late.push_back(t);
  opt.set_late_parameters(late);
  std::weak_ptr<const run_context> weak = ctx;  // the runner holds the listener: no cycle
  ctx->runners[id]->set_gradient_listener([weak, id](int p) {
    auto c = weak.lock();
    if (!c) return;
    auto& o = *c->dp_optimizers[id];
    const bool last_pass = c->in_last_backward && c->in_last_backward[id].load();
    for (int b : o.gradient_accumulated(p, last_pass)) {
      const double at = c->now();
      send_gradient_bucket(*c, id, o.step_index(), b);
      caf::anon_send(c->optimizer_shards[id], msg::shard_work_done{o.step_index(), work::sent_early, b, at});
    }
  });
}

class optimizer_shard {
 public:
  optimizer_shard(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int id)
      : self_(self),
        ctx_(std::move(ctx)),
        id_(id),
        v_(ctx_->pipeline_stage(id)),
        replica_(ctx_->replica_of_stage(id)),
        rank_(ctx_->rank_of_stage(id)),
        D_(ctx_->replicas) {
    if (D_ > 1) {
      auto ctx = ctx_;
      const int at = id;
      post("listening for final gradients", [ctx, at] { listen_for_final_buckets(ctx, at); });
    }
  }

  void on_gradients_ready(const msg::gradients_ready& g);
  void on_slice(msg::shard_slice& s);
  void on_work_done(const msg::shard_work_done& w);
  void on_optimizer_step(const msg::optimizer_step& s);
  void on_save_state(const msg::save_state& s);

 private:
  void enter(int step);
  void post(const std::string& what, std::function<void()> job);
  int buckets() const;
  void maybe_reduced();
  void maybe_step();
  void maybe_done();
  void one_replica_step(const msg::optimizer_step& s);

  caf::event_based_actor* self_;
  std::shared_ptr<const run_context> ctx_;
  const int id_, v_, replica_, rank_, D_;
  int step_ = -1;
  double sync_start_ = 1e300;  // the first bucket this stage sent, this step
  std::map<int, std::map<int, tensor_box>> contributions_;  // bucket -> replica -> slice
  bool own_sent_ = false, reported_ = false, step_asked_ = false, stepping_ = false, stepped_ = false;
  int reduced_ = 0, gathered_ = 0;
  msg::optimizer_step step_msg_{};
};

void optimizer_shard::enter(int step) {
  if (step == step_) return;
  step_ = step;
  contributions_.clear();
  own_sent_ = reported_ = step_asked_ = stepping_ = stepped_ = false;
  reduced_ = gathered_ = 0;
  sync_start_ = 1e300;
}

int optimizer_shard::buckets() const { return static_cast<int>(ctx_->dp_optimizers[id_]->layout().buckets.size()); }

// Runs `job` on the rank's compute thread; if it throws, the job stops naming the stage.
void optimizer_shard::post(const std::string& what, std::function<void()> job) {
  auto sup = ctx_->supervisor;
  const std::string where = "optimizer shard of " + ctx_->describe_stage(id_);
  self_->send(ctx_->compute[rank_], msg::compute_job{[sup, where, what, job = std::move(job)] {
                try {
                  job();
                } catch (const std::exception& e) {
                  caf::anon_send(sup, msg::failure{where + ": " + what + " failed: " + error_text(e)});
                }
              }});
}

void optimizer_shard::on_gradients_ready(const msg::gradients_ready& g) {
  enter(g.step);
  auto ctx = ctx_;
  const int id = id_, step = g.step, rank = rank_;
  auto me = caf::actor_cast<caf::actor>(self_);
  if (D_ == 1) {  // no sync: the stage's own gradients, a sum per parameter (tied copies counted where owned)
    post("the gradient norm", [ctx, id, step, rank] {
      const auto& opt = *ctx->optimizers[id];
      auto sums = opt.grad_sq_sums(ctx->runners[id]->tied_copies());
      const double now = ctx->now();
      caf::anon_send(ctx->supervisor, msg::grad_sq_parts{step, rank, {{id, std::move(sums)}}, now, now, opt.state_bytes()});
    });
    return;
  }
  sync_start_ = std::min(sync_start_, ctx_->now());
  post("sending the gradient buckets", [ctx, id, step, me] {
    for (int b : ctx->dp_optimizers[id]->take_remaining_buckets()) send_gradient_bucket(*ctx, id, step, b);
    caf::anon_send(me, msg::shard_work_done{step, work::sent, 0, 0});
  });
}

void optimizer_shard::on_slice(msg::shard_slice& s) {
  enter(s.step);
  auto ctx = ctx_;
  const int id = id_, step = s.step, b = s.bucket, from = s.replica, v = v_, D = D_, rank = rank_, me_replica = replica_;
  auto me = caf::actor_cast<caf::actor>(self_);
  tensor_box t = std::move(s.tensor);
  switch (static_cast<tensor_kind>(s.kind)) {
    case tensor_kind::gradient_slice: {
      auto& in = contributions_[b];
      in[from] = std::move(t);
      if (static_cast<int>(in.size()) < D) return;
      std::vector<tensor_box> by_replica;
      for (auto& [d, slice] : in) by_replica.push_back(slice);  // replica order
      contributions_.erase(b);
      post("reducing bucket " + std::to_string(b), [ctx, id, v, D, step, b, rank, me_replica, me, by_replica] {
        auto& opt = *ctx->dp_optimizers[id];
        opt.reduce(b, by_replica);
        if (opt.zero_stage() == 0) {  // every replica steps the whole stage: it needs this slice too
          const tensor_box mine = opt.reduced_slice(b);  // one copy, shared by every send
          for (int j = 0; j < D; ++j)
            if (j != me_replica) ctx->send_tensor(tensor_kind::reduced_slice, step, ctx->stage_id(j, v), b, rank, mine);
        }
        caf::anon_send(me, msg::shard_work_done{step, work::reduced, b, 0});
      });
      return;
    }
    case tensor_kind::reduced_slice:
      post("gathering reduced bucket " + std::to_string(b), [ctx, id, step, b, from, me, t] {
        ctx->dp_optimizers[id]->set_reduced_slice(from, b, t);
        caf::anon_send(me, msg::shard_work_done{step, work::gathered, b, 0});
      });
      return;
    case tensor_kind::parameter_slice:
      post("gathering parameters of bucket " + std::to_string(b), [ctx, id, step, b, from, me, t] {
        ctx->dp_optimizers[id]->set_parameter_slice(from, b, t);
        caf::anon_send(me, msg::shard_work_done{step, work::gathered, b, 0});
      });
      return;
    default:
      self_->send(ctx_->supervisor, msg::failure{"optimizer shard of " + ctx_->describe_stage(id_) +
                                                 ": a tensor of a kind it does not take"});
  }
}

void optimizer_shard::on_work_done(const msg::shard_work_done& w) {
  if (w.what == work::sent_early) {  // the first message of its step, possibly
    enter(w.step);
    sync_start_ = std::min(sync_start_, w.sq);  // sq carries the time here
    return;
  }
  if (w.step != step_) return;
  switch (w.what) {
    case work::sent: own_sent_ = true; break;
    case work::reduced: ++reduced_; break;
    case work::norm: {
      const double now = ctx_->now();
      self_->send(ctx_->supervisor, msg::grad_sq_parts{w.step, rank_, {{id_, {w.sq}}}, sync_start_, now,
                                                       ctx_->dp_optimizers[id_]->state_bytes()});
      return;
    }
    case work::gathered: ++gathered_; break;
    case work::stepped: stepped_ = true; break;
  }
  maybe_reduced();
  maybe_step();
  maybe_done();
}

// Every bucket of this shard is reduced: the norm of the shard.
void optimizer_shard::maybe_reduced() {
  if (reported_ || !own_sent_ || reduced_ < buckets()) return;
  reported_ = true;
  auto ctx = ctx_;
  const int id = id_, step = step_;
  auto me = caf::actor_cast<caf::actor>(self_);
  post("the gradient norm", [ctx, id, step, me] {
    caf::anon_send(me, msg::shard_work_done{step, work::norm, 0, ctx->dp_optimizers[id]->grad_sq_sum()});
  });
}

void optimizer_shard::on_optimizer_step(const msg::optimizer_step& s) {
  enter(s.step);
  if (D_ == 1) {
    one_replica_step(s);
    return;
  }
  step_asked_ = true;
  step_msg_ = s;
  maybe_step();
}

// ZeRO-0 steps once every other shard's reduced slices are here; ZeRO-1 right away, then
// hands its new parameters on.
void optimizer_shard::maybe_step() {
  if (!step_asked_ || stepping_) return;
  const bool zero0 = ctx_->dp_optimizers[id_]->zero_stage() == 0;
  const int others = (D_ - 1) * buckets();
  if (zero0 && gathered_ < others) return;
  stepping_ = true;
  auto ctx = ctx_;
  const int id = id_, v = v_, D = D_, rank = rank_, me_replica = replica_;
  const msg::optimizer_step s = step_msg_;
  auto me = caf::actor_cast<caf::actor>(self_);
  post("the optimizer step", [ctx, id, v, D, rank, me_replica, s, zero0, me] {
    auto& opt = *ctx->dp_optimizers[id];
    opt.step(s.clip_coefficient, s.lr);
    opt.zero_grad();
    if (s.check_finite)
      if (const std::string bad = opt.nonfinite_parameter(); !bad.empty())
        caf::anon_send(ctx->supervisor, msg::failure{nonfinite_update_error(s.step, bad + " (" + ctx->describe_stage(id) + ")"),
                                                    s.step, true});
    if (!zero0)
      for (int b = 0; b < static_cast<int>(opt.layout().buckets.size()); ++b) {
        const tensor_box mine = opt.parameter_slice(b);
        for (int j = 0; j < D; ++j)
          if (j != me_replica) ctx->send_tensor(tensor_kind::parameter_slice, s.step, ctx->stage_id(j, v), b, rank, mine);
      }
    caf::anon_send(me, msg::shard_work_done{s.step, work::stepped, 0, 0});
  });
}

void optimizer_shard::maybe_done() {
  if (!stepped_) return;
  const bool zero0 = ctx_->dp_optimizers[id_]->zero_stage() == 0;
  if (!zero0 && gathered_ < (D_ - 1) * buckets()) return;
  stepped_ = false;  // once
  self_->send(ctx_->supervisor, msg::optimizer_done{step_, id_});
}

// Snapshot on the compute thread (between steps: nothing changes the state meanwhile), then
// the file is written on a thread of its own while training goes on.
void optimizer_shard::on_save_state(const msg::save_state& s) {
  auto ctx = ctx_;
  const int id = id_;
  post("the checkpoint snapshot", [ctx, id, s] {
    auto tensors = std::make_shared<named_tensors>(snapshot_of(*ctx, id));
    auto sup = ctx->supervisor;
    caf::anon_send(sup, msg::state_snapshotted{s.step, id});
    auto parts = ctx->checkpoint_parts;
    parts->begin(s.partial);
    std::thread([sup, id, s, tensors, parts]() mutable {
      msg::state_written w{s.step, id, "stage-" + std::to_string(id) + ".safetensors", 0, "", ""};
      try {
        // Hashed as written (not read back): the hash of a piece overlaps the writeback of the last.
        sha256_stream hash;
        save_safetensors(s.partial + "/" + w.file, *tensors, [&](const char* data, std::size_t n) {
          parts->check();  // the run gave the checkpoint up: stop here (the file is removed)
          hash.update(data, n);
          w.bytes += n;
        });
        w.sha256 = hash.hex();
      } catch (const std::exception& e) {
        w.error = error_text(e);
      }
      const bool written = w.error.empty();
      caf::anon_send(sup, std::move(w));
      sup = caf::actor{};  // no handle outlives end(): the runtime then lets the actor system go
      parts->end(s.partial, written);
    }).detach();
  });
}

void optimizer_shard::one_replica_step(const msg::optimizer_step& s) {
  auto ctx = ctx_;
  const int id = id_;
  post("the optimizer step", [ctx, id, s] {
    auto& opt = *ctx->optimizers[id];
    opt.step(s.lr, s.clip_coefficient);  // <= 1 (clip_coefficient): 1 reads the gradients as they are
    opt.zero_grad();
    if (s.check_finite)
      if (const std::string bad = opt.nonfinite_parameter(); !bad.empty())
        caf::anon_send(ctx->supervisor, msg::failure{nonfinite_update_error(s.step, bad + " (" + ctx->describe_stage(id) + ")"),
                                                    s.step, true});
    caf::anon_send(ctx->supervisor, msg::optimizer_done{s.step, id});
  });
}

}  // namespace

caf::behavior optimizer_shard_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int id) {
  auto s = std::make_shared<optimizer_shard>(self, std::move(ctx), id);
  return {
      [s](msg::gradients_ready& g) { s->on_gradients_ready(g); },
      [s](msg::shard_slice& x) { s->on_slice(x); },
      [s](msg::shard_work_done& w) { s->on_work_done(w); },
      [s](msg::optimizer_step& o) { s->on_optimizer_step(o); },
      [s](msg::save_state& x) { s->on_save_state(x); },
  };
}

}  // namespace actorpipe
