// Builds a run and drives it: one actor system per process, detached compute actors (one
// thread per local rank), chunk / stage / optimizer actors for the local ranks, a feeder, and
// on process 0 the supervisor. Actors in other processes are reached through proxies and the
// control plane; tensors through the transport (local hand-off, or UCX across processes).
#include "actors/pipeline_runtime.hpp"

#include <caf/io/all.hpp>

#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "actors/control_plane.hpp"
#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/log.hpp"
#include "core/model/compute_threads.hpp"
#include "core/process_layout.hpp"
#include "core/train/run_setup.hpp"
#include "transport/local/local_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace actorpipe {
namespace {

// What every process must agree on (anything that changes the numbers or the plan).
std::string job_fingerprint(const train_options& o, const process_group& g) {
  std::ostringstream s;
  s.precision(17);
  s << "schedule=" << o.schedule << " schedule_file=" << o.schedule_file << " stages=" << o.stages
    << " chunks=" << o.chunks << " microbatches=" << o.microbatches << " microbatch_size=" << o.microbatch_size
    << " steps=" << o.steps << " lr=" << o.lr << " warmup=" << o.warmup_steps << " min_lr_ratio=" << o.min_lr_ratio
    << " grad_clip=" << o.grad_clip << " weight_decay=" << o.weight_decay << " data=" << o.data
    << " data_file=" << o.data_file << " data_seed=" << o.data_seed << " greedy_budget=" << o.greedy_budget
    << " activation_checkpointing=" << o.activation_checkpointing << " replan=" << o.plan_on_measured_costs << " vocab=" << o.model.vocab
    << " seq_len=" << o.model.seq_len << " hidden=" << o.model.hidden << " heads=" << o.model.heads
    << " layers=" << o.model.layers << " init_std=" << o.model.init_std << " seed=" << o.model.seed
    << " world_size=" << g.processes << " ranks_per_process=";
  for (int c : g.ranks_per_process) s << c << ";";
  return s.str();
}

std::string ranks_text(const std::vector<int>& process_of_rank, int p) {
  std::string out;
  for (size_t r = 0; r < process_of_rank.size(); ++r)
    if (process_of_rank[r] == p) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// Where arrived tensors go. Holds the context weakly: the transport outlives no run, but a
// late arrival must not keep the context (and its actors) alive.
transport::receive_handler make_dispatch(const std::weak_ptr<const run_context>& weak) {
  return [weak](const tensor_meta& m, tensor_box t) {
    auto ctx = weak.lock();
    if (!ctx) return;
    const int v = m.virtual_stage;
    if (m.kind == tensor_kind::parameter && ctx->process == 0 && v >= 0 && v < ctx->stages && !ctx->is_local_stage(v)) {
      caf::anon_send(ctx->supervisor, msg::parameter_arrived{v, m.microbatch, std::move(t)});  // v: the sender's stage
      return;
    }
    if (v < 0 || v >= ctx->stages || !ctx->is_local_stage(v) || m.kind == tensor_kind::parameter) {
      caf::anon_send(ctx->supervisor, msg::failure{"rank " + std::to_string(m.source_rank) + " sent a tensor for virtual stage " +
                                                   std::to_string(v) + ", which is not in process " + std::to_string(ctx->process)});
      return;
    }
    switch (m.kind) {
      case tensor_kind::activation:
        caf::anon_send(ctx->chunks[v], msg::activation{m.step, v, m.microbatch, std::move(t)});
        break;
      case tensor_kind::gradient:
        caf::anon_send(ctx->chunks[v], msg::gradient{m.step, v, m.microbatch, std::move(t)});
        break;
      case tensor_kind::tied_gradient:
        caf::anon_send(ctx->chunks[v], msg::tied_gradient{m.step, v, m.microbatch, std::move(t)});
        break;
      default:
        caf::anon_send(ctx->supervisor, msg::failure{"rank " + std::to_string(m.source_rank) +
                                                     " sent a tensor of a kind no actor expects"});
    }
  };
}

// Between the transport and this process's actors. Tensors that arrive before the actors
// exist (a fast peer may start sending as soon as the job has formed) wait here until the
// dispatch opens; failures before then are printed. Closing it at the end drops both.
struct transport_gate {
  std::mutex mutex;
  bool open = false;
  std::vector<std::pair<tensor_meta, tensor_box>> held;
  transport::receive_handler dispatch;
  transport::failure_handler on_failure;

  void arrive(const tensor_meta& m, tensor_box t) {
    transport::receive_handler f;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!open) {
        held.emplace_back(m, std::move(t));
        return;
      }
      f = dispatch;
    }
    f(m, std::move(t));
  }
  void fail(int process, const std::string& reason) {
    transport::failure_handler f;
    {
      std::lock_guard<std::mutex> lock(mutex);
      f = on_failure;
    }
    if (f)
      f(process, reason);
    else
      log_error("transport: " + reason);
  }
  void open_with(transport::receive_handler d, transport::failure_handler fail_f) {
    std::vector<std::pair<tensor_meta, tensor_box>> early;
    {
      std::lock_guard<std::mutex> lock(mutex);
      dispatch = d;
      on_failure = std::move(fail_f);
      open = true;
      early.swap(held);
    }
    for (auto& [m, t] : early) d(m, std::move(t));
  }
  void close() { open_with([](const tensor_meta&, tensor_box) {}, [](int, const std::string&) {}); }
};

}  // namespace

train_result run_pipeline(const train_options& o, const std::function<void(const step_metrics&)>& on_step,
                          const chunk_factory& make_chunk, const process_group& group) {
  const bool multi = group.processes > 1;
  if (multi && o.no_pipeline) throw std::invalid_argument("--no-pipeline runs in one process: got WORLD_SIZE=" + std::to_string(group.processes));
  if (group.process < 0 || group.process >= group.processes)
    throw std::invalid_argument("RANK=" + std::to_string(group.process) + " outside [0, " + std::to_string(group.processes) + ")");
  const int stages_requested = o.no_pipeline ? 1 : o.stages;
  const std::vector<int> process_of_rank = assign_ranks_to_processes(stages_requested, group.processes, group.ranks_per_process);

  auto ctx = std::make_shared<run_context>();
  ctx->options = o;
  ctx->process = group.process;
  ctx->processes = group.processes;
  ctx->process_of_rank = process_of_rank;
  run_setup setup = prepare_run(o, make_chunk, [&](int r) { return process_of_rank[r] == group.process; });
  ctx->place = setup.place;
  ctx->ranks = setup.place.ranks;
  ctx->stages = setup.place.num_virtual_stages();
  ctx->microbatches = o.microbatches;
  ctx->static_plan = setup.static_plan;
  ctx->policy = setup.policy;
  ctx->replan_from = replan_step(o);
  ctx->runners = setup.runners;
  ctx->optimizers = setup.optimizers;
  ctx->ties = setup.ties;
  ctx->batches = setup.data;
  ctx->tokens_per_sample = setup.tokens_per_sample;
  ctx->on_step = on_step;
  train_result result;
  result.data_description = setup.data_description;
  result.partition = setup.partition;
  result.split = describe_partition(setup.layers, setup.layer_names);
  ctx->result = group.process == 0 ? &result : nullptr;

  std::shared_ptr<transport::ucx_transport> ucx;
  if (multi) {
    frame_limits limits;
    limits.ranks = ctx->ranks;
    limits.virtual_stages = ctx->stages;
    limits.microbatches = ctx->microbatches;
    // Received tensors come from a pool of buffers (fresh memory is several times slower to
    // receive into). Keep enough idle for every microbatch's activation twice over.
    transport::ucx_receive_pool_options pool;
    const std::size_t activation_bytes = std::size_t(o.microbatch_size) * o.model.seq_len * o.model.hidden * sizeof(float);
    pool.max_idle_bytes = std::max(pool.max_idle_bytes, 2 * std::size_t(o.microbatches) * activation_bytes);
    ucx = std::make_shared<transport::ucx_transport>(group.process, group.processes, limits, pool);
    ctx->data = ucx;
  } else {
    ctx->data = transport::make_local_transport();
  }
  auto gate = std::make_shared<transport_gate>();
  ctx->data->set_handlers([gate](const tensor_meta& m, tensor_box t) { gate->arrive(m, std::move(t)); },
                          [gate](int p, const std::string& reason) { gate->fail(p, reason); });

  std::string error;
  {
    caf::actor_system_config cfg;
    // The actors' own work is microseconds per message. CAF's default work-stealing workers
    // poll (one per core: ~6% of the CPU here, taken from the compute threads), and once they
    // back off they sleep 10 ms before looking again. The sharing scheduler blocks on a
    // condition variable and is woken by each message: no polling, no 10 ms stalls.
    cfg.set("scheduler.policy", caf::atom("sharing"));
    cfg.set("scheduler.max-threads", size_t{1});
    add_message_types(cfg);
    if (multi) cfg.load<caf::io::middleman>();
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};

    // A multi-process job forms first: process 0 admits every other process, the transport
    // addresses are exchanged, and the run's clock is aligned with process 0's.
    caf::actor control;
    if (multi) {
      cluster_options c;
      c.processes = group.processes;
      c.process = group.process;
      c.master_addr = group.master_addr;
      c.master_port = group.master_port;
      c.token = group.token;
      c.fingerprint = job_fingerprint(o, group);
      c.join_timeout_s = group.join_timeout_s;
      c.process_of_rank = process_of_rank;
      c.clock = [ctx] { return ctx->now(); };
      control = spawn_control_plane(sys, c, ucx->address(), self);
      msg::cluster_ready ready;
      self->monitor(control);
      self->receive([&](msg::cluster_ready& r) { ready = std::move(r); },
                    [&](const caf::down_msg& d) { ready.error = "the control plane stopped: " + sys.render(d.reason); });
      if (!ready.error.empty()) {
        caf::anon_send_exit(control, caf::exit_reason::user_shutdown);
        throw std::runtime_error(ready.error);
      }
      ucx->connect(ready.addresses);
      log_debug("data plane (UCX) connected to the other " + std::to_string(group.processes - 1) +
                (group.processes == 2 ? " process" : " processes"));
      if (group.process != 0)
        ctx->epoch = std::chrono::steady_clock::now() -
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(ready.clock));
    }

    auto proxy = [&](int p, target_kind kind, int index) { return spawn_remote_proxy(sys, control, p, kind, index); };
    ctx->compute.resize(ctx->ranks);
    for (int r = 0; r < ctx->ranks; ++r) {
      if (!ctx->is_local_rank(r)) continue;
      ctx->compute[r] = sys.spawn<caf::detached>(compute_actor);
      const int threads = o.threads_per_stage;
      caf::anon_send(ctx->compute[r], msg::compute_job{[threads] { set_compute_threads(threads); }});
    }
    // Spawned before wiring finishes, but no message reaches them until start_run below (or,
    // in another process, until the control plane gets its targets), and the context is
    // complete by then (CAF's mailbox hands it over with a happens-before).
    std::shared_ptr<const run_context> shared = ctx;
    for (int v = 0; v < ctx->stages; ++v)
      ctx->chunks.push_back(ctx->is_local_stage(v) ? sys.spawn(chunk_actor, shared, v)
                                                   : proxy(ctx->process_of_stage(v), target_kind::chunk, v));
    for (int r = 0; r < ctx->ranks; ++r) {
      const bool local = ctx->is_local_rank(r);
      ctx->stage.push_back(local ? sys.spawn(stage_actor, shared, r) : proxy(process_of_rank[r], target_kind::stage, r));
      ctx->optimizer.push_back(local ? sys.spawn(optimizer_actor, shared, r)
                                     : proxy(process_of_rank[r], target_kind::optimizer, r));
    }
    ctx->feeder = sys.spawn(feeder_actor, shared);
    for (int p = 0; p < ctx->processes; ++p) ctx->feeders.push_back(p == ctx->process ? ctx->feeder : proxy(p, target_kind::feeder, 0));
    ctx->supervisor = ctx->process == 0 ? sys.spawn(supervisor_actor, shared) : proxy(0, target_kind::supervisor, 0);

    std::weak_ptr<const run_context> weak = shared;
    gate->open_with(make_dispatch(weak), [weak, process_of_rank](int p, const std::string& reason) {
      auto c = weak.lock();
      if (!c) return;
      const std::string ranks = ranks_text(process_of_rank, p);
      caf::anon_send(c->supervisor, msg::failure{"lost process " + std::to_string(p) +
                                                 (ranks.find(',') == std::string::npos ? " (rank " : " (ranks ") + ranks +
                                                 "): process " + std::to_string(c->process) +
                                                 "'s data connection to it failed: " + reason});
    });

    // This process's actors, for shutdown and for reporting one that dies.
    std::vector<caf::actor> local = ctx->local_actors();
    if (ctx->process == 0) local.push_back(ctx->supervisor);
    auto stop_local = [&] {
      for (auto& a : local) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    };

    if (multi) {
      msg::set_targets t;
      auto add = [&](target_kind k, int i, const caf::actor& a) { t.targets[{static_cast<std::uint8_t>(k), i}] = a; };
      for (int r = 0; r < ctx->ranks; ++r)
        if (ctx->is_local_rank(r)) add(target_kind::stage, r, ctx->stage[r]), add(target_kind::optimizer, r, ctx->optimizer[r]);
      for (int v = 0; v < ctx->stages; ++v)
        if (ctx->is_local_stage(v)) add(target_kind::chunk, v, ctx->chunks[v]);
      add(target_kind::feeder, 0, ctx->feeder);
      add(target_kind::runtime, 0, caf::actor_cast<caf::actor>(self));
      if (ctx->process == 0) add(target_kind::supervisor, 0, ctx->supervisor);
      self->send(control, std::move(t));
    }

    const caf::actor_addr control_addr = control ? control.address() : caf::actor_addr{};
    if (ctx->process == 0) {
      self->monitor(ctx->supervisor);  // should it ever die without answering, we still return
      self->send(ctx->supervisor, msg::start_run{self});
      bool done = false;
      while (!done)
        self->receive([&](msg::run_finished& f) { error = std::move(f.error), done = true; },
                      [&](const caf::down_msg& d) {
                        if (d.source == control_addr) {  // the supervisor still stops the job
                          caf::anon_send(ctx->supervisor, msg::failure{"the control plane stopped: " + sys.render(d.reason)});
                          return;
                        }
                        if (d.source != ctx->supervisor.address()) return;
                        error = "the supervisor stopped without finishing the run: " + sys.render(d.reason);
                        stop_local();
                        done = true;
                      });
      if (multi) {  // tell the other processes, and wait until they hung up
        self->send(control, msg::shutdown_cluster{error});
        self->receive([](msg::cluster_closed&) {}, caf::after(std::chrono::seconds(10)) >> [] {});
      }
    } else {
      // A worker process: run until process 0 says the run is over (or is lost). A local
      // actor that dies is reported to the supervisor, which stops the job.
      for (auto& a : local) self->monitor(a);
      bool done = false;
      while (!done)
        self->receive([&](msg::run_finished& f) { error = std::move(f.error), done = true; },
                      [&](const caf::down_msg& d) {
                        if (d.source == control_addr) {
                          error = "the control plane stopped: " + sys.render(d.reason);
                          done = true;
                          return;
                        }
                        caf::anon_send(ctx->supervisor, msg::failure{"an actor of process " + std::to_string(ctx->process) +
                                                                     " stopped unexpectedly: " + sys.render(d.reason)});
                      });
      stop_local();
    }
    // The context holds handles to the actors and the actors hold the context: wait until
    // every local actor is down, then drop the handles, or a detached thread waits forever for
    // its actor's last reference and the actor system never shuts down.
    std::set<caf::actor_addr> alive;
    for (auto& a : local) {
      alive.insert(a.address());
      self->monitor(a);
    }
    if (ctx->process != 0) stop_local();
    while (!alive.empty()) self->receive([&](const caf::down_msg& d) { alive.erase(d.source); });
    if (control) caf::anon_send_exit(control, caf::exit_reason::user_shutdown);
    gate->close();
    ctx->compute.clear(), ctx->chunks.clear(), ctx->stage.clear(), ctx->optimizer.clear(), ctx->feeders.clear();
    ctx->feeder = caf::actor{};
    ctx->supervisor = caf::actor{};
  }
  ctx->data.reset();
  ucx.reset();
  if (!error.empty()) throw std::runtime_error(error);
  if (group.process != 0) return result;
  if (!multi) result.parameters = collect_parameters(ctx->runners);
  result.predicted = predict_from_measured(setup, result.last_step, result.replanned.get());
  return result;
}

}  // namespace actorpipe
