// Builds a run and drives it: one actor system per process, detached compute actors (one
// thread per local rank), stage actors for the local ranks, chunk and optimizer-shard actors
// for their virtual stages, a feeder, and on process 0 the supervisor. Actors in other
// processes are reached through proxies and the control plane; tensors through the transport
// the factory makes (a hand-off in one process).
// run_pipeline reads as its steps: validate, build the context, make the transport, form the
// job, spawn, wire, run, tear down.
#include "actors/pipeline_runtime.hpp"

#include <caf/io/all.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <set>
#include <stdexcept>
#include <type_traits>

#include "actors/control_plane.hpp"
#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/checkpoint/checkpoint_store.hpp"
#include "core/checkpoint/run_meta.hpp"
#include "core/content_digest.hpp"
#include "core/number_text.hpp"
#include "core/schedule/plan.hpp"
#include "core/job_token.hpp"
#include "core/log.hpp"
#include "core/model/error_text.hpp"
#include "core/model/safetensors.hpp"
#include "core/train/run_state.hpp"
#include "core/model/compute_threads.hpp"
#include "core/process_layout.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/signal_name.hpp"
#include "core/train/run_setup.hpp"
#include "transport/transport_factory.hpp"

namespace actorpipe {
namespace {

// What every process must agree on (anything that changes the numbers or the plan), one
// `name=value` per line so that a mismatch can be told option by option
// (describe_job_difference). Numbers in their shortest exact form. Files by what they hold,
// not by their paths: each process reads its own copy, under a path of its host's.
std::string job_fingerprint(const train_options& o, const job_place& g, const plan* file_plan, int resumed_after,
                            const std::string& resumed_digest,
                            const std::string& partition, const std::vector<int>& process_of_rank) {
  std::string s;
  auto add = [&s](const char* name, const auto& value) {
    s += name;
    s += '=';
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::string>) {
      s += value;
    } else if constexpr (std::is_same_v<T, bool>) {
      s += value ? "true" : "false";
    } else {
      char buf[64];
      const auto r = std::to_chars(buf, buf + sizeof buf, value);
      s.append(buf, r.ptr);
    }
    s += '\n';
  };
  const auto file = [](const std::string& path) { return path.empty() ? std::string() : content_digest(path); };
  add("model", o.model_name);
  add("partition", partition);  // as resolved: a default given aloud is the default
  add("schedule", o.schedule_file.empty() ? o.schedule : std::string());
  add("schedule_file", file_plan ? "a plan of digest " + text_digest(format_plan(*file_plan)) : std::string());
  add("stages", o.stages);
  add("chunks", o.chunks);
  add("microbatches", o.microbatches);
  add("microbatch_size", o.microbatch_size);
  add("steps", o.steps);
  add("lr", o.lr);
  add("warmup_steps", o.warmup_steps);
  add("min_lr_ratio", o.min_lr_ratio);
  add("lr_decay_style", o.lr_decay_style);
  add("lr_decay_steps", o.lr_decay_steps);
  add("grad_clip", o.grad_clip);
  add("weight_decay", o.weight_decay);
  add("adam_beta1", o.adam_beta1);
  add("adam_beta2", o.adam_beta2);
  add("adam_eps", o.adam_eps);
  add("data", o.data);
  // With a Megatron index's digest: a process without that index (or another) would read the
  // same bytes as other tokens.
  add("data_file", o.data == "file" ? data_content_digest(o) : data_file_digest(o.data_file));
  add("init_from", file(o.init_from));
  add("eval_file", data_file_digest(o.text.eval_file));
  add("eval_every", o.eval_every);
  add("eval_microbatches", o.eval_microbatches);
  add("eval_split", o.eval_split);
  add("vocab_file", file(o.text.vocab_file));
  add("lower_case", o.text.lower_case);
  add("text_columns", o.text.columns);
  add("max_positions", o.text.max_positions);
  add("intermediate", o.text.intermediate);
  // --seed gives both; a library caller may set them apart.
  add("seed", o.data_seed == o.model.seed ? std::to_string(o.model.seed)
                                          : std::to_string(o.model.seed) + " (data " + std::to_string(o.data_seed) + ")");
  add("threads_per_stage", o.threads_per_stage);  // intra-op threads split reductions otherwise
  add("budget", o.greedy_budget);
  add("activation_checkpointing", o.activation_checkpointing);
  add("unit_cost_plan", !o.plan_on_measured_costs);
  add("late_input_grad", !o.early_input_grad);
  add("no_w_fill", !o.fill_weight_grads);
  add("pause_w", o.pause_filled_weight_grads);
  add("vocab", o.model.vocab);
  add("seq_len", o.model.seq_len);
  add("hidden", o.model.hidden);
  add("heads", o.model.heads);
  add("layers", o.model.layers);
  add("init_std", o.model.init_std);
  add("dp", o.dp);
  add("zero", o.zero_stage);
  add("bucket_mb", o.bucket_mb);
  // Every process writes its parts of a checkpoint into the folder process 0 names: a --save-dir
  // on one side only was refused later as a folder the member could not see.
  add("save_dir", o.save_dir.empty() ? std::string("none") : std::string("given"));
  // Each side watches the other by its own: a process sending no heartbeats (0) was taken for
  // a frozen one by a member waiting 3 s, and a healthy job stopped.
  add("heartbeat_timeout", g.heartbeat_timeout_s);
  add("step_timeout", o.step_timeout_s);
  add("world_size", g.processes);
  // The step each resumes after (0: none), and the checkpoint by its manifest's digest (which
  // holds every file's SHA-256): processes on other checkpoints trained mixed states, then
  // waited on each other for ever; on two copies of one step, a mixed state silently.
  add("resumed_after_step", resumed_after == 0 ? std::string("0")
                                               : std::to_string(resumed_after) + " " + resumed_digest);
  // As laid out: an even spread given aloud is the even spread.
  std::vector<int> per_process(static_cast<std::size_t>(std::max(g.processes, 1)), 0);
  for (int p : process_of_rank)
    if (p >= 0 && p < g.processes) ++per_process[static_cast<std::size_t>(p)];
  std::string per;
  for (int c : per_process) per += (per.empty() ? "" : ",") + std::to_string(c);
  add("ranks_per_process", per);
  return s;
}

// Where arrived tensors go. Holds the context weakly: the transport outlives no run, but a
// late arrival must not keep the context (and its actors) alive.
transport::receive_handler make_dispatch(const std::weak_ptr<const run_context>& weak) {
  return [weak](const tensor_meta& m, tensor_box t) {
    auto ctx = weak.lock();
    if (!ctx) return;
    const int v = m.virtual_stage;  // a virtual stage id
    const int ids = ctx->stage_ids();
    if (m.kind == tensor_kind::parameter && ctx->process == 0 && v >= 0 && v < ids && !ctx->is_local_stage(v)) {
      caf::anon_send(ctx->supervisor, msg::parameter_arrived{v, m.microbatch, std::move(t)});  // v: the sender's stage
      return;
    }
    if (v < 0 || v >= ids || !ctx->is_local_stage(v) || m.kind == tensor_kind::parameter) {
      caf::anon_send(ctx->supervisor, msg::failure{"rank " + std::to_string(m.source_rank) + " sent a tensor for virtual stage " +
                                                   std::to_string(v) + ", which is not in process " + std::to_string(ctx->process)});
      return;
    }
    switch (m.kind) {
      case tensor_kind::activation:
        caf::anon_send(ctx->chunk_actors[v], msg::activation{m.step, v, m.microbatch, std::move(t)});
        break;
      case tensor_kind::gradient:
        caf::anon_send(ctx->chunk_actors[v], msg::gradient{m.step, v, m.microbatch, std::move(t)});
        break;
      case tensor_kind::tied_gradient:
        caf::anon_send(ctx->chunk_actors[v], msg::tied_gradient{m.step, v, m.microbatch, std::move(t)});
        break;
      case tensor_kind::gradient_slice:
      case tensor_kind::reduced_slice:
      case tensor_kind::parameter_slice:
        caf::anon_send(ctx->optimizer_shards[v], msg::shard_slice{static_cast<std::uint8_t>(m.kind), m.step, m.microbatch,
                                                                  ctx->grid.replica_of(m.source_rank), std::move(t)});
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

// The last step a rebuilt plan can apply from: the plan is rebuilt after the first measured
// step and once more after the next, on both steps' costs (-1: no rebuild).
int last_replan(int replan_from, int steps) {
  return replan_from < 0 ? -1 : std::min(replan_from + 1, steps - 1);
}

void validate_place(const train_options& o, const job_place& place) {
  if (place.processes > 1 && o.no_pipeline)
    throw std::invalid_argument("--no-pipeline runs in one process: got WORLD_SIZE=" + std::to_string(place.processes));
  if (place.processes < 1)
    throw std::invalid_argument("job_place.processes (WORLD_SIZE) must be >= 1: got " + std::to_string(place.processes));
  if (place.process < 0 || place.process >= place.processes)
    throw std::invalid_argument("RANK=" + std::to_string(place.process) + " outside [0, " + std::to_string(place.processes) + ")");
  if (place.processes == 1) return;
  // A library caller's place without a token (read_launch_env leaves it to the caller): the
  // member failed "a challenge of 32 bytes (actorpipe's are 32)" and process 0 waited out
  // --join-timeout.
  check_job_token(place.token);
  // Set directly by a library caller (the command line checks its own flags): a port past
  // 65535 wrapped around, a timeout of NaN read as "joined within nan s".
  if (place.master_port < 1 || place.master_port > 65535)
    throw std::invalid_argument("job_place.master_port (MASTER_PORT) must be in 1..65535: got " +
                                std::to_string(place.master_port));
  if (!(place.join_timeout_s > 0) || !std::isfinite(place.join_timeout_s))
    throw std::invalid_argument("job_place.join_timeout_s (--join-timeout) must be a finite number > 0: got " +
                                number_text(place.join_timeout_s));
  if (!(place.heartbeat_timeout_s >= 0) || !std::isfinite(place.heartbeat_timeout_s))
    throw std::invalid_argument("job_place.heartbeat_timeout_s (--heartbeat-timeout) must be a finite number >= 0: got " +
                                number_text(place.heartbeat_timeout_s));
}

// Everything the actors share: the prepared run (partition, plan or policy, runners,
// optimizers, data) and where each rank lives. `result` receives the run's description now
// and (process 0) its metrics later.
// An eval round's plan: the training plan's forwards, in each rank's order. Forwards wait only
// for forwards, so dropping the backwards of a deadlock-free plan leaves one. A dynamic
// policy's run takes GPipe's order on the policy's placement (GPipe's own plan, on a loop,
// deadlocked a policy on a V): each rank its virtual stages in increasing order, every
// microbatch of one before the next; what each waits for lies on lower virtual stages.
std::shared_ptr<const plan> eval_plan_of(const run_setup& setup, const train_options& o) {
  plan p;
  if (setup.static_plan) {
    p = *setup.static_plan;
  } else {
    p.name = "gpipe's order on the " + setup.place.kind + " placement";
    p.place = setup.place;
    p.microbatches = o.microbatches;
    p.ranks.resize(static_cast<std::size_t>(setup.place.ranks));
    for (int r = 0; r < setup.place.ranks; ++r)
      for (const int v : setup.place.virtual_stages_of(r))
        for (int m = 0; m < o.microbatches; ++m) p.ranks[r].push_back(action{op_kind::forward, v, m});
  }
  p.name += " (forwards only, for evaluation)";
  for (auto& actions : p.ranks)
    actions.erase(std::remove_if(actions.begin(), actions.end(), [](const action& a) { return a.op != op_kind::forward; }),
                  actions.end());
  return std::make_shared<const plan>(std::move(p));
}

std::shared_ptr<run_context> make_context(const train_options& o, const std::function<void(const step_metrics&)>& on_step,
                                          const job_place& place, const std::vector<int>& process_of_rank,
                                          const run_setup& setup, train_result& result) {
  auto ctx = std::make_shared<run_context>();
  ctx->options = o;
  ctx->process = place.process;
  ctx->processes = place.processes;
  ctx->process_of_rank = process_of_rank;
  ctx->place = setup.place;
  ctx->grid = setup.grid;
  ctx->ranks = setup.place.ranks;
  ctx->replicas = setup.grid.replicas;
  ctx->virtual_stages = setup.place.num_virtual_stages();
  ctx->microbatches = o.microbatches;
  ctx->static_plan = setup.static_plan;
  ctx->policy = setup.policy;
  ctx->replan_from = replan_step(o);
  ctx->replan_until = last_replan(ctx->replan_from, o.steps);
  ctx->runners = setup.runners;
  ctx->optimizers = setup.optimizers;
  ctx->dp_optimizers = setup.dp_optimizers;
  ctx->ties = setup.ties;
  ctx->batches = setup.data;
  ctx->tokens_per_sample = setup.tokens_per_sample;
  ctx->on_step = on_step;
  ctx->model = setup.model;
  if (setup.eval_microbatches > 0) {
    ctx->eval_batches = setup.eval_data;
    ctx->eval_microbatches = setup.eval_microbatches;
    ctx->eval_plan = eval_plan_of(setup, o);
  }
  result.data_description = setup.data_description;
  result.partition = setup.partition;
  ctx->partition = setup.partition;
  result.split = describe_partition(setup.layers, setup.layer_names);
  if (setup.partition.rfind("profile", 0) == 0) {  // measured in this process: the split a job of several can take
    std::string counts;
    for (const auto& l : setup.layers) counts += (counts.empty() ? "" : ",") + std::to_string(l.end - l.start);
    result.split += " (as --partition counts:" + counts + ")";
  }
  result.grid = setup.grid.describe();
  ctx->result = place.process == 0 ? &result : nullptr;
  return ctx;
}

// --resume: the newest valid checkpoint (or the one named) into this process's runners and
// optimizers, whatever layout wrote it; the run goes on from its step.
void resume_state(run_context& ctx, const run_setup& setup, train_result& result) {
  const train_options& o = ctx.options;
  // No checkpoint to resume is bad input (exit 2): a restart would find none either.
  // Each process reads only the tensors of the parameters its ranks hold (and their moments).
  const run_state_view view = state_view(setup);
  const auto wanted = wanted_by(view);
  named_tensors params, moments;
  resume_choice c;
  std::set<std::string> warned;  // once, where the search goes round again
  try {
    c = read_resume_checkpoint(o.resume, [&](const resume_choice& chosen) {
      for (const auto& why : chosen.refused)
        if (warned.insert(why).second) log_warn("not resuming from a damaged checkpoint: " + why);
      // Checked before the files are read: a checkpoint of another model says so, not which
      // tensor did not fit.
      if (const std::string why = resume_model_mismatch(chosen.manifest.meta, o); !why.empty())
        throw std::invalid_argument("--resume " + chosen.path + ": " + why);
      if (chosen.manifest.step >= o.steps)
        throw std::invalid_argument("--resume " + chosen.path + " holds step " + std::to_string(chosen.manifest.step) +
                                    ", and --steps=" + std::to_string(o.steps) + " leaves nothing to train");
      params.clear();
      moments.clear();
      // A tensor in two of its files: the last read won without a word (--init-from refuses it).
      std::map<std::string, std::string> file_of;
      for (const auto& f : chosen.manifest.files)
        for (auto& t : load_safetensors(chosen.path + "/" + f.name, wanted)) {
          if (const auto [at, fresh] = file_of.emplace(t.first, f.name); !fresh)
            throw std::invalid_argument("--resume " + chosen.path + ": '" + t.first + "' is in both " + at->second +
                                        " and " + f.name + ": which one is meant cannot be told");
          (t.first.find('@') == std::string::npos ? params : moments).push_back(std::move(t));
        }
    });
  } catch (const checkpoint_error& e) {
    throw std::invalid_argument(e.what());
  }
  // A checkpoint of a run that had diverged (one written before such runs failed): its first
  // step's NaN loss was blamed on --lr, exit 1, which launch --max-restarts retried.
  if (const std::string bad = nonfinite_tensor_text(params); !bad.empty())
    throw std::invalid_argument("--resume " + c.path + ": " + bad + ": its run had diverged; resume from an earlier checkpoint");
  try {
    load_parameter_tensors(view, params);
    load_optimizer_tensors(view, moments, c.manifest.step);
  } catch (const std::exception& e) {
    const std::string vocabulary = resume_vocabulary_hint(c.manifest.meta, o);
    throw std::invalid_argument("--resume " + c.path + ": " + error_text(e) + (vocabulary.empty() ? "" : "; " + vocabulary));
  }
  // The run's step, whatever updates its parameters had (one no gradient reached has fewer).
  for (const auto& dp : view.dp_optimizers)
    if (dp) dp->set_step_index(c.manifest.step);
  ctx.first_step = static_cast<int>(c.manifest.step);
  {
    std::ifstream manifest(c.path + "/manifest.json", std::ios::binary);
    ctx.resumed_manifest_digest =
        text_digest(std::string((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>()));
  }
  const auto pending = c.manifest.meta.find("eval_pending");
  ctx.eval_pending = pending != c.manifest.meta.end() && pending->is_boolean() && pending->get<bool>();
  if (ctx.eval_pending) ctx.eval_pending_change = pending_eval_change(c.manifest.meta, o);
  // A plan rebuilt on measured costs is measured on the first step this run takes.
  if (ctx.replan_from >= 0) ctx.replan_from = ctx.first_step + 1 < o.steps ? ctx.first_step + 1 : -1;
  ctx.replan_until = last_replan(ctx.replan_from, o.steps);
  result.resumed_from = c.path;
  result.refused = c.refused;
  log_info("resuming from " + c.path + " after step " + std::to_string(c.manifest.step));
  // Process 0 says once what this run changes of the checkpoint's: a changed seed or batch
  // is easily a slip, and then the steps from here are not those of the run it continues.
  const std::vector<std::string> changes = resume_changes(c.manifest.meta, o);
  if (ctx.result && !changes.empty()) {
    std::string list;
    for (const auto& change : changes) list += (list.empty() ? "" : ", ") + change;
    log_warn("--resume " + c.path + " continues a run with other settings: " + list + "; steps " +
             std::to_string(c.manifest.step + 1) + ".." + std::to_string(o.steps) +
             " train as this run's settings say, not as the interrupted run would have");
  }
}

// The job's transport, its arrivals held at `gate` until the actors exist.
std::shared_ptr<transport::tensor_transport> make_transport(const run_context& ctx, const job_place& place,
                                                            const std::shared_ptr<transport_gate>& gate) {
  const train_options& o = ctx.options;
  transport::transport_options opts;
  opts.kind = transport::default_transport_kind(place.processes);
  opts.process = place.process;
  opts.processes = place.processes;
  opts.limits.ranks = ctx.world_ranks();
  opts.limits.virtual_stages = ctx.stage_ids();
  opts.limits.microbatches = ctx.microbatches;
  // Every microbatch's activation may be in flight, twice over; with data parallelism, a
  // bucket of gradient slices too.
  const std::size_t activation_bytes = std::size_t(o.microbatch_size) * o.model.seq_len * o.model.hidden * sizeof(float);
  opts.in_flight_bytes = 2 * std::size_t(o.microbatches) * activation_bytes;
  if (ctx.replicas > 1) opts.in_flight_bytes += std::size_t(o.bucket_mb * (1 << 20));
  auto data = transport::make_tensor_transport(opts);
  data->set_handlers([gate](const tensor_meta& m, tensor_box t) { gate->arrive(m, std::move(t)); },
                     [gate](int p, const std::string& reason) { gate->fail(p, reason); });
  return data;
}

void configure_actor_system(caf::actor_system_config& cfg, bool multi) {
  // The actors' own work is microseconds per message. CAF's default work-stealing workers
  // poll (one per core: ~6% of the CPU here, taken from the compute threads), and once they
  // back off they sleep 10 ms before looking again. The sharing scheduler blocks on a
  // condition variable and is woken by each message: no polling, no 10 ms stalls.
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", size_t{1});
  add_message_types(cfg);
  if (multi) cfg.load<caf::io::middleman>();
}

// The host's boot id: steady_clock (CLOCK_MONOTONIC) is one clock for every process that
// shares it. "" where unreadable.
std::string host_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

// A process's run clock: process 0's. On process 0's host, its zero itself (steady_clock is
// shared there). Elsewhere, process 0's clock as its welcome said, taken when the welcome
// came: behind by the welcome's trip (0.1-1 ms between two processes of one host), so the
// actions of a step would seem to start before it. The exact zero is kept only while it
// agrees with the welcome's within a second (a container's own time namespace shifts
// CLOCK_MONOTONIC under the same boot id).
std::chrono::steady_clock::time_point aligned_epoch(const msg::cluster_ready& ready, const std::string& own_boot_id) {
  using clock = std::chrono::steady_clock;
  const clock::time_point estimate =
      clock::now() - std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(ready.clock));
  if (own_boot_id.empty() || ready.boot_id != own_boot_id) return estimate;
  const clock::time_point exact{std::chrono::duration_cast<clock::duration>(std::chrono::nanoseconds(ready.epoch_ns))};
  return std::chrono::abs(exact - estimate) < std::chrono::seconds(1) ? exact : estimate;
}

// A multi-process job forms first: process 0 admits every other process, the transport
// addresses are exchanged, and the run's clock is aligned with process 0's. Returns the
// control plane; throws std::runtime_error when the job cannot form.
caf::actor form_job(caf::actor_system& sys, caf::scoped_actor& self, const std::shared_ptr<run_context>& ctx,
                    const job_place& place) {
  cluster_options c;
  static_cast<job_place&>(c) = place;
  c.fingerprint = job_fingerprint(ctx->options, place,
                                  ctx->options.schedule_file.empty() ? nullptr : ctx->static_plan.get(), ctx->first_step,
                                  ctx->resumed_manifest_digest,
                                  ctx->partition, ctx->process_of_rank);
  c.process_of_rank = ctx->process_of_rank;
  c.held = held_names(ctx->runners, ctx->virtual_stages, place.process);
  c.replicas = ctx->replicas;
  c.clock = [ctx] { return ctx->now(); };
  c.epoch_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(ctx->epoch.time_since_epoch()).count();
  c.boot_id = host_boot_id();
  if (place.process != 0 && place.heartbeat_timeout_s == 0) c.member_silence_limit_s = 2 * ctx->options.step_timeout_s + 10;
  caf::actor control = spawn_control_plane(sys, c, ctx->data->address(), self);
  msg::cluster_ready ready;
  self->monitor(control);
  // Until the job forms (up to --join-timeout), a stop signal ends the wait: no step is in
  // flight, so there is nothing to finish or save.
  const std::atomic<int>* stop = ctx->options.stop_signal;
  int stopped_by = 0;
  for (bool done = false; !done;) {
    self->receive([&](msg::cluster_ready& r) { ready = std::move(r), done = true; },
                  [&](const caf::down_msg& d) {
                    ready.error = "the control plane stopped: " + sys.render(d.reason);
                    done = true;
                  },
                  caf::after(std::chrono::milliseconds(100)) >> [&] {
                    if (const int sig = stop ? stop->load() : 0; sig != 0) {
                      ready.error = signal_name(sig) + " before every process had joined the job: nothing was trained";
                      stopped_by = sig;
                      done = true;
                    }
                  });
  }
  if (!ready.error.empty()) {
    caf::anon_send_exit(control, caf::exit_reason::user_shutdown);
    if (ready.refused) throw std::invalid_argument(ready.error);  // exit 2: a restart would meet it again
    if (stopped_by != 0) throw stopped_on_request(ready.error, stopped_by);
    throw std::runtime_error(ready.error);
  }
  if (place.process != 0) ctx->epoch = aligned_epoch(ready, c.boot_id);
  ctx->process0_run_mark = ready.run_mark;
  try {
    ctx->data->connect(ready.addresses);
  } catch (...) {
    // The control plane would heartbeat on, and the actor system's end wait for it, for ever.
    caf::anon_send_exit(control, caf::exit_reason::user_shutdown);
    throw;
  }
  log_debug("data plane (" + ctx->data->name() + ") connected to the other " + std::to_string(place.processes - 1) +
            (place.processes == 2 ? " process" : " processes"));
  return control;
}

// This process's actors, and proxies for those in other processes. Spawned before wiring
// finishes, but no message reaches them until start_run (or, in another process, until the
// control plane gets its targets), and the context is complete by then (CAF's mailbox hands
// it over with a happens-before).
void spawn_actors(caf::actor_system& sys, const caf::actor& control, const std::shared_ptr<run_context>& ctx) {
  auto proxy = [&](int p, target_kind kind, int index) { return spawn_remote_proxy(sys, control, p, kind, index); };
  ctx->compute.resize(ctx->world_ranks());
  ctx->queued_forward_or_input.reset(new std::atomic<int>[ctx->world_ranks()]());
  ctx->backward_done.reset(new std::atomic<int>[3 * ctx->stage_ids()]());
  ctx->in_last_backward.reset(new std::atomic<bool>[ctx->stage_ids()]());
  ctx->stage_busy_since.reset(new std::atomic<double>[ctx->world_ranks()]);
  for (int r = 0; r < ctx->world_ranks(); ++r) ctx->stage_busy_since[r].store(-1);
  ctx->track_producers();
  for (int r = 0; r < ctx->world_ranks(); ++r) {
    if (!ctx->is_local_rank(r)) continue;
    ctx->compute[r] = sys.spawn<caf::detached>(compute_actor);
    const int threads = ctx->options.threads_per_stage;
    caf::anon_send(ctx->compute[r], msg::compute_job{[threads] { set_compute_threads(threads); }});
  }
  std::shared_ptr<const run_context> shared = ctx;
  for (int id = 0; id < ctx->stage_ids(); ++id) {
    const bool local = ctx->is_local_stage(id);
    const int p = ctx->process_of_stage(id);
    ctx->chunk_actors.push_back(local ? sys.spawn(chunk_actor, shared, id) : proxy(p, target_kind::chunk, id));
    ctx->optimizer_shards.push_back(local ? sys.spawn(optimizer_shard_actor, shared, id)
                                          : proxy(p, target_kind::optimizer, id));
  }
  for (int r = 0; r < ctx->world_ranks(); ++r)
    ctx->stage.push_back(ctx->is_local_rank(r) ? sys.spawn(stage_actor, shared, r)
                                               : proxy(ctx->process_of_rank[r], target_kind::stage, r));
  ctx->feeder = sys.spawn(feeder_actor, shared);
  for (int p = 0; p < ctx->processes; ++p) ctx->feeders.push_back(p == ctx->process ? ctx->feeder : proxy(p, target_kind::feeder, 0));
  ctx->supervisor = ctx->process == 0 ? sys.spawn(supervisor_actor, shared) : proxy(0, target_kind::supervisor, 0);
}

// Arrived tensors (and those held so far) go to the actors; a lost peer is reported to the
// supervisor, naming its ranks.
void open_gate(transport_gate& gate, const std::shared_ptr<const run_context>& shared) {
  std::weak_ptr<const run_context> weak = shared;
  gate.open_with(make_dispatch(weak), [weak](int p, const std::string& reason) {
    auto c = weak.lock();
    if (!c) return;
    // The transport's reasons name the process already ("lost process 1: ..."): once is enough.
    const std::string named = "lost process " + std::to_string(p) + ": ";
    const std::string why = reason.rfind(named, 0) == 0 ? reason.substr(named.size()) : reason;
    caf::anon_send(c->supervisor, msg::failure{"lost process " + std::to_string(p) + " (" +
                                               ranks_label(c->process_of_rank, p) + "): process " + std::to_string(c->process) +
                                               "'s data connection to it failed: " + why});
  });
}

// Tells the control plane where envelopes for this process's actors go.
void send_targets(caf::scoped_actor& self, const caf::actor& control, const run_context& ctx) {
  msg::set_targets t;
  auto add = [&](target_kind k, int i, const caf::actor& a) { t.targets[{static_cast<std::uint8_t>(k), i}] = a; };
  for (int r = 0; r < ctx.world_ranks(); ++r)
    if (ctx.is_local_rank(r)) add(target_kind::stage, r, ctx.stage[r]);
  for (int id = 0; id < ctx.stage_ids(); ++id)
    if (ctx.is_local_stage(id))
      add(target_kind::chunk, id, ctx.chunk_actors[id]), add(target_kind::optimizer, id, ctx.optimizer_shards[id]);
  add(target_kind::feeder, 0, ctx.feeder);
  add(target_kind::runtime, 0, caf::actor_cast<caf::actor>(self));
  if (ctx.process == 0) add(target_kind::supervisor, 0, ctx.supervisor);
  self->send(control, std::move(t));
}

void stop_all(const std::vector<caf::actor>& actors) {
  for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

// Process 0: start the run and wait until the supervisor says it is over (or dies); in a
// multi-process job, then tell the others and wait until they hung up. Returns the run's error
// (`certain`: one every run would meet, run_finished::certain).
std::string run_as_process_0(caf::actor_system& sys, caf::scoped_actor& self, const caf::actor& control,
                             const run_context& ctx, const std::vector<caf::actor>& local, bool& certain) {
  std::string error;
  const caf::actor_addr control_addr = control ? control.address() : caf::actor_addr{};
  self->monitor(ctx.supervisor);  // should it ever die without answering, we still return
  self->send(ctx.supervisor, msg::start_run{self});
  bool done = false;
  // A rank's stage actor inside one message for longer than a step may take holds the shared
  // scheduler thread, and with it the supervisor: this thread ends the run.
  const auto stuck_stage = [&ctx]() -> std::string {
    for (int r = 0; r < ctx.world_ranks(); ++r) {
      const double since = ctx.stage_busy_since ? ctx.stage_busy_since[r].load() : -1;
      if (since >= 0 && ctx.now() - since > ctx.options.step_timeout_s)
        return "rank " + std::to_string(r) + "'s schedule policy has not returned for " +
               printf_text("%.1f", ctx.now() - since) + " s (--step-timeout " + number_text(ctx.options.step_timeout_s) +
               "): it holds the thread every actor of the run shares, so nothing else can go on";
    }
    return "";
  };
  while (!done)
    self->receive([&](msg::run_finished& f) { error = std::move(f.error), certain = f.certain, done = true; },
                  [&](const caf::down_msg& d) {
                    if (d.source == control_addr) {  // the supervisor still stops the job
                      caf::anon_send(ctx.supervisor, msg::failure{"the control plane stopped: " + sys.render(d.reason)});
                      return;
                    }
                    if (d.source != ctx.supervisor.address()) return;
                    error = "the supervisor stopped without finishing the run: " + sys.render(d.reason);
                    stop_all(local);
                    done = true;
                  },
                  caf::after(std::chrono::seconds(1)) >> [&] {
                    error = stuck_stage();
                    if (error.empty()) return;
                    stop_all(local);
                    done = true;
                  });
  if (control) {  // tell the other processes, and wait until they hung up
    // A run that stopped on a failed checkpoint or evaluation pass ends with process 0's error
    // (exit 1) once its outputs are written: the others end with it (they exited 0).
    std::string told = error;
    if (told.empty() && ctx.result)
      for (const std::string* e : {&ctx.result->checkpoint_error, &ctx.result->eval_error})
        if (told.empty() && !e->empty()) told = "process 0 stopped the run: " + *e;
    self->send(control, msg::shutdown_cluster{told, ctx.result ? ctx.result->stopped_by_signal : 0, certain});
    self->receive([](msg::cluster_closed&) {}, caf::after(std::chrono::seconds(10)) >> [] {});
  }
  return error;
}

// A worker process: run until process 0 says the run is over (or is lost). A local actor that
// dies is reported to the supervisor, which stops the job. Returns the run's error (`certain`
// as process 0 said it).
std::string run_as_worker(caf::actor_system& sys, caf::scoped_actor& self, const caf::actor& control,
                          const run_context& ctx, const std::vector<caf::actor>& local, int& stopped_by, bool& certain) {
  std::string error;
  const caf::actor_addr control_addr = control ? control.address() : caf::actor_addr{};
  for (auto& a : local) self->monitor(a);
  bool done = false, stop_passed_on = false;
  const std::atomic<int>* stop = ctx.options.stop_signal;
  while (!done)
    self->receive([&](msg::run_finished& f) {
                    error = std::move(f.error), done = true;
                    stopped_by = f.stopped_by_signal;
                    certain = f.certain;
                  },
                  [&](const caf::down_msg& d) {
                    if (d.source == control_addr) {
                      error = "the control plane stopped: " + sys.render(d.reason);
                      done = true;
                      return;
                    }
                    caf::anon_send(ctx.supervisor, msg::failure{"an actor of process " + std::to_string(ctx.process) +
                                                                " stopped unexpectedly: " + sys.render(d.reason)});
                  },
                  // A stop signal this process got (perhaps it alone: a node preempted) stops
                  // the job after the step in flight: process 0 decides when.
                  caf::after(std::chrono::milliseconds(100)) >> [&] {
                    const int sig = stop ? stop->load() : 0;
                    if (sig == 0 || stop_passed_on) return;
                    stop_passed_on = true;
                    caf::anon_send(ctx.supervisor, msg::stop_request{ctx.process, sig});
                  });
  stop_all(local);
  return error;
}

// The context holds handles to the actors and the actors hold the context: wait until every
// local actor is down, then drop the handles, or a detached thread waits forever for its
// actor's last reference and the actor system never shuts down. After a failed run the wait
// is bounded: a compute thread inside an action that never returns (a layer or a policy that
// blocks) cannot take its exit, and the run's error must still reach the user.
void tear_down(caf::scoped_actor& self, const caf::actor& control, run_context& ctx, const std::vector<caf::actor>& local,
               transport_gate& gate, bool failed) {
  std::set<caf::actor_addr> alive;
  for (auto& a : local) {
    alive.insert(a.address());
    self->monitor(a);
  }
  if (ctx.process != 0) stop_all(local);
  const auto patience = std::chrono::seconds(5);
  const auto until = std::chrono::steady_clock::now() + patience;
  bool gave_up = false;
  while (!alive.empty() && !gave_up) {
    if (!failed) {
      self->receive([&](const caf::down_msg& d) { alive.erase(d.source); });
      continue;
    }
    const auto left = std::max(std::chrono::steady_clock::duration::zero(), until - std::chrono::steady_clock::now());
    self->receive([&](const caf::down_msg& d) { alive.erase(d.source); },
                  caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(left)) >> [&] { gave_up = true; });
  }
  if (!alive.empty()) {
    std::string busy;
    for (std::size_t r = 0; r < ctx.compute.size(); ++r)
      if (ctx.compute[r] && alive.count(ctx.compute[r].address())) busy += (busy.empty() ? "" : ", ") + std::to_string(r);
    log_warn(std::to_string(alive.size()) + " of this process's actors" +
             (busy.empty() ? std::string() : " (the compute threads of rank " + busy + ")") + " still ran " +
             std::to_string(patience.count()) +
             " s after the run stopped: an action that does not return (a layer or a policy that blocks?) is left to "
             "the process's exit");
  }
  if (control) caf::anon_send_exit(control, caf::exit_reason::user_shutdown);
  gate.close();
  // An actor still running is abandoned to what it runs: the handles stay, the run's actor
  // system is left undestroyed (shut_down) and its context alive (run_pipeline), so an action
  // that returns after all finds them, not freed memory.
  if (!alive.empty()) {
    ctx.abandoned = true;
    return;
  }
  ctx.compute.clear(), ctx.chunk_actors.clear(), ctx.stage.clear(), ctx.optimizer_shards.clear(), ctx.feeders.clear();
  ctx.feeder = caf::actor{};
  ctx.supervisor = caf::actor{};
}

// How a member's refusal reads ("process 1 (rank 1) refused the job once it formed: ..."). It
// is a certain failure: process 0 ends the run as refused (exit 2: a restart would meet the
// same folder).
constexpr char refused_once_formed[] = ") refused the job once it formed: ";

// A process other than 0 that cannot take part in the job that has just formed (its check of
// after_join threw) says why to process 0's supervisor, which stops the job with that reason
// (else process 0 saw only a closed connection: "died or was killed"), and waits (a few
// seconds at most) until process 0 says the run is over, so that its hanging up is not
// reported first.
void refuse_to_process_0(caf::scoped_actor& self, const caf::actor& control, const run_context& ctx,
                         const std::string& why) {
  msg::set_targets t;
  t.targets[{static_cast<std::uint8_t>(target_kind::runtime), 0}] = caf::actor_cast<caf::actor>(self);
  // Its feeder is asked to start the first step meanwhile: taken here and left unread (it was
  // dropped with a warning naming an unknown actor).
  t.targets[{static_cast<std::uint8_t>(target_kind::feeder), 0}] = caf::actor_cast<caf::actor>(self);
  self->send(control, std::move(t));
  self->send(control, msg::forward{0, static_cast<std::uint8_t>(target_kind::supervisor), 0,
                                   caf::make_message(msg::failure{"process " + std::to_string(ctx.process) + " (" +
                                                                      ranks_label(ctx.process_of_rank, ctx.process) +
                                                                      refused_once_formed + why,
                                                                  -1, false, true})});
  self->monitor(control);
  bool done = false;
  while (!done)
    self->receive([&](msg::run_finished&) { done = true; },
                  [&](const caf::down_msg& d) { done = d.source == control.address(); },
                  caf::after(std::chrono::seconds(10)) >> [&] { done = true; });
}

// Forms the job (several processes), spawns, wires, runs and tears down in `sys`. Returns the
// run's error ("" when it finished).
std::string run_in(caf::actor_system& sys, const std::shared_ptr<run_context>& ctx, const job_place& place,
                   const std::shared_ptr<transport_gate>& gate, int& stopped_by, bool& certain) {
  const bool multi = place.processes > 1;
  caf::scoped_actor self{sys};
  const caf::actor control = multi ? form_job(sys, self, ctx, place) : caf::actor{};
  std::vector<caf::actor> local;  // this process's actors, for shutdown and for reporting one that dies
  try {
    if (multi && ctx->options.after_join) {
      try {
        ctx->options.after_join(ctx->process0_run_mark);
      } catch (const std::exception& e) {
        if (ctx->process != 0) refuse_to_process_0(self, control, *ctx, e.what());
        throw;
      }
    }
    spawn_actors(sys, control, ctx);
    open_gate(*gate, ctx);
    local = ctx->local_actors();
    if (ctx->process == 0) local.push_back(ctx->supervisor);
    if (multi) send_targets(self, control, *ctx);
  } catch (...) {
    // Whatever was spawned ends, so the actor system's end does not wait for it.
    // (Not the proxies of other processes' actors: an exit would travel to them.)
    const auto end = [&sys](const caf::actor& a) {
      if (a && a.node() == sys.node()) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    };
    for (const auto* group : {&ctx->compute, &ctx->stage, &ctx->chunk_actors, &ctx->optimizer_shards, &ctx->feeders})
      for (const auto& a : *group) end(a);
    end(ctx->feeder);
    end(ctx->supervisor);
    if (control) caf::anon_send_exit(control, caf::exit_reason::user_shutdown);
    gate->close();
    throw;
  }
  const std::string error = ctx->process == 0 ? run_as_process_0(sys, self, control, *ctx, local, certain)
                                              : run_as_worker(sys, self, control, *ctx, local, stopped_by, certain);
  tear_down(self, control, *ctx, local, *gate, !error.empty());
  return error;
}

// Every actor of the run is down by now; the actor system's destructor waits, without a
// bound, until the registry counts none running. A worker of a multi-process job has been
// seen (rarely, under load) to wait there for ever, on an actor that should be gone (open: see
// the issue notes). The run's outcome is known, so the wait is bounded: after `patience` the
// system is left undestroyed, with a warning, and the process goes on to exit.
// A run that abandoned an actor (tear_down: its action did not return) keeps that actor's
// handles in its context, so the actor is never destroyed: its detached thread, once the
// action returns, waits for that, and the system's destructor waits for the thread, for ever
// (a layer returning 7-12 s after a step timeout hung the run). Its system is never destroyed.
void shut_down(std::unique_ptr<caf::actor_system> sys, std::unique_ptr<caf::actor_system_config> cfg,
               std::chrono::seconds patience, bool abandoned) {
  if (abandoned) {
    (void)sys.release();
    (void)cfg.release();
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (sys->registry().running() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (sys->registry().running() > 0) {
    log_warn("the actor system still counts " + std::to_string(sys->registry().running()) + " running actor(s) " +
             std::to_string(patience.count()) + " s after the run ended; leaving it to the process's exit");
    (void)sys.release();  // its destructor would wait for ever
    (void)cfg.release();
    return;
  }
  sys.reset();  // before its config, which it refers to
  cfg.reset();
}

// One actor system for this process: form the job (several processes), spawn, wire, run and
// tear down. Returns the run's error ("" when it finished; `certain`: one every run would meet).
std::string run_actors(const std::shared_ptr<run_context>& ctx, const job_place& place,
                       const std::shared_ptr<transport_gate>& gate, int& stopped_by, bool& certain) {
  auto cfg = std::make_unique<caf::actor_system_config>();
  configure_actor_system(*cfg, place.processes > 1);
  auto sys = std::make_unique<caf::actor_system>(*cfg);
  const std::string error = run_in(*sys, ctx, place, gate, stopped_by, certain);
  // Checkpoint parts still being written belong to a checkpoint that will not complete: they
  // stop at their next piece, and their directory goes. Their threads hold actor handles, so
  // they end before the actor system does.
  if (!error.empty()) ctx->checkpoint_parts->give_up();
  if (!ctx->checkpoint_parts->settle(std::chrono::seconds(30)))
    log_warn("checkpoint parts were still being written 30 s after the run ended");
  shut_down(std::move(sys), std::move(cfg), std::chrono::seconds(5), ctx->abandoned);
  return error;
}

}  // namespace

train_result run_pipeline(const train_options& o, const std::function<void(const step_metrics&)>& on_step,
                          const chunk_factory& make_chunk, const job_place& place,
                          const std::function<void(const eval_record&)>& on_eval) {
  check_train_options(o);  // before the place: its rules count the ranks these give
  validate_place(o, place);
  refuse_inference_mode();
  const caller_torch_state caller;  // its generator and thread count, put back at the end
  // One writer per --save-dir (two runs in one folder write over and prune each other's
  // checkpoints): the command line holds the lock already; a library caller gets it here,
  // before training (a folder that cannot be made is refused now, not at the first save).
  std::optional<save_dir_lock> save_dir_held;
  if (!o.save_dir.empty() && place.process == 0 && !save_dir_lock::held_by_this_thread(o.save_dir)) {
    save_dir_held.emplace(o.save_dir);
    check_save_dir_is_ours(o.save_dir, o.resume, o.keep_last);  // as the command line asks
  }
  const std::vector<int> process_of_rank = ranks_over_processes(o, place.processes, place.ranks_per_process);
  const run_setup setup = prepare_run(o, make_chunk, [&](int r) { return process_of_rank[r] == place.process; });
  train_result result;
  auto ctx = make_context(o, on_step, place, process_of_rank, setup, result);
  ctx->on_eval = on_eval;
  if (!o.init_from.empty()) init_from_weights(setup, o);
  if (!o.resume.empty()) resume_state(*ctx, setup, result);
  auto gate = std::make_shared<transport_gate>();
  ctx->data = make_transport(*ctx, place, gate);
  int stopped_by = 0;  // another process's word on how the job ended (process 0's)
  bool certain = false;  // every run would fail so
  const std::string error = run_actors(ctx, place, gate, stopped_by, certain);
  if (place.process != 0) result.stopped_by_signal = stopped_by;
  if (ctx->abandoned) {  // an actor may still return into the run: it must find it, not the caller's frame
    static std::mutex kept_mutex;
    static std::vector<std::shared_ptr<run_context>>* kept = new std::vector<std::shared_ptr<run_context>>;
    ctx->result = nullptr;
    ctx->on_step = nullptr;
    ctx->on_eval = nullptr;
    std::lock_guard<std::mutex> lock(kept_mutex);
    kept->push_back(ctx);
  } else {
    ctx->data.reset();
  }
  // A member's refusal is the job's (exit 2): launch restarted it, to wait out --join-timeout.
  // So is a model's failure that every run meets again (certain_failure, a tensor no frame
  // holds): launch --max-restarts ran it again each time. Said by msg::failure::certain.
  if (!error.empty() && certain) throw std::invalid_argument(error);
  // A failure while the job stopped on a signal (a process its launch killed as it stopped): the
  // stop asked for, not a failure to restart (the other node's launch restarted the job, to wait
  // out --join-timeout twice).
  const int own_signal = o.stop_signal ? o.stop_signal->load() : 0;
  const int stopping_on = place.process == 0 ? result.stopped_by_signal : stopped_by != 0 ? stopped_by : own_signal;
  if (!error.empty() && stopping_on != 0)
    throw stopped_on_request(error + " (as the job stopped on the " + signal_name(stopping_on) + " asked for)", stopping_on);
  if (!error.empty()) throw std::runtime_error(error);
  if (place.process != 0) return result;
  if (place.processes == 1)  // replica 0's: every replica holds the same
    result.parameters = collect_parameters({ctx->runners.begin(), ctx->runners.begin() + ctx->virtual_stages});
  result.predicted = predict_from_measured(setup, result.last_step, result.replanned.get());
  return result;
}

}  // namespace actorpipe
