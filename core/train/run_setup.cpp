// Validating train_options and building the pieces of a run.
#include "core/train/run_setup.hpp"

#include <cmath>
#include "core/exact_number.hpp"
#include "core/number_text.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>

#include "core/held_names.hpp"
#include "core/optim/optimizer.hpp"
#include "core/log.hpp"
#include "core/model/compute_threads.hpp"
#include "core/model/layer_chunk.hpp"
#include "core/model/layer_model.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/process_layout.hpp"
#include "core/text_file.hpp"

#include "core/schedule/plan_validator.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/policy_simulator.hpp"
#include "core/run_room.hpp"
#include "core/time_limits.hpp"
#include "core/train/run_state.hpp"

namespace actorpipe {
namespace {

void need(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}


}  // namespace

void check_train_options(const train_options& o) {
  need(o.stages >= 1, "--stages must be >= 1: got " + std::to_string(o.stages));
  need(o.chunks >= 1, "--chunks must be >= 1: got " + std::to_string(o.chunks));
  need(o.microbatches >= 1, "--microbatches must be >= 1: got " + std::to_string(o.microbatches));
  // The unpipelined run too (it ran 2^31 - 1 microbatches until --step-timeout, where a
  // pipeline's plan refused them at once).
  need(o.microbatches <= max_plan_forwards, "--microbatches must be at most " + std::to_string(max_plan_forwards) +
                                                " (what a plan may hold): got " + std::to_string(o.microbatches));
  need(o.microbatch_size >= 1, "--microbatch-size must be >= 1: got " + std::to_string(o.microbatch_size));
  need(o.steps >= 1, "--steps must be >= 1: got " + std::to_string(o.steps));
  need(o.keep_step_metrics >= 0, "keep_step_metrics must be >= 0 (0: every step): got " + std::to_string(o.keep_step_metrics));
  // Past 1024 (no rank computes on more) the thread probe below started tens of thousands of
  // threads before it refused.
  need(o.threads_per_stage >= 1 && o.threads_per_stage <= 1024,
       "--threads-per-stage must be in [1, 1024]: got " + std::to_string(o.threads_per_stage));
  // Finite too: the library's callers set them directly (inf failed in the first step).
  // Up to the largest float: the update multiplies float weights by it (1e300 made them inf).
  // And from the smallest normal float: one below is nothing or a few bits to the update
  // (--lr 1e-310 trained at lr 0, without a word).
  need(o.lr >= std::numeric_limits<float>::min() && o.lr <= std::numeric_limits<float>::max(),
       "--lr must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got " + exact_number_text(o.lr));
  need(o.warmup_steps >= 0, "--warmup-steps must be >= 0: got " + std::to_string(o.warmup_steps));
  need(o.grad_clip >= 0 && std::isfinite(o.grad_clip),
       "--grad-clip must be a finite number >= 0 (0 = off): got " + exact_number_text(o.grad_clip));
  need(o.weight_decay >= 0 && std::isfinite(o.weight_decay),
       "--weight-decay must be a finite number >= 0: got " + exact_number_text(o.weight_decay));
  // AdamW's decoupled decay multiplies the weights by 1 - lr x weight_decay each step: at 1 or
  // more it zeroes or flips them, and the run diverged blaming --lr or --grad-clip.
  need(o.lr * o.weight_decay < 1,
       "--weight-decay " + number_text(o.weight_decay) + " with --lr " + number_text(o.lr) + ": each step multiplies " +
           "the weights by 1 - lr x weight_decay = " + number_text(1 - o.lr * o.weight_decay) +
           ", which must be > 0 (weight decay is usually 0.01 to 0.1)");
  for (const auto& [flag, value] : {std::pair<const char*, double>{"--min-lr-ratio", o.min_lr_ratio},
                                    {"--adam-beta1", o.adam_beta1},
                                    {"--adam-beta2", o.adam_beta2},
                                    {"--adam-eps", o.adam_eps}})
    if (const std::string why = optimizer_setting_error(flag, value); !why.empty()) need(false, why);
  parse_lr_decay(o.lr_decay_style);  // names the flag and the value
  if (const std::string why = lr_decay_steps_error(o.lr_decay_steps, o.warmup_steps); !why.empty()) need(false, why);
  need(o.step_timeout_s > 0 && o.step_timeout_s <= max_timeout_s,
       "--step-timeout must be > 0 and at most " + number_text(max_timeout_s) + " seconds: got " +
           number_text(o.step_timeout_s));
  need(o.greedy_budget >= 0, "--budget must be >= 0 (0 = the policy's default): got " + std::to_string(o.greedy_budget));
  need(o.data == "synthetic" || o.data == "file", "--data must be synthetic or a file: got '" + o.data + "'");
  need(!(o.data == "file" && o.data_file.empty()), "data=file needs --data-file (the file to read): got none");
  // The gpt's data opens a blend (open_source); another model's would read its text as a path.
  need(o.data_blend.empty() || o.model_name.empty() || o.model_name == "gpt",
       "--data-file '" + o.data_file + "' blends " + std::to_string(o.data_blend.size()) +
           " files: a blend is read by --model gpt; --model " + o.model_name + " reads one file");
  need(o.dp >= 1, "--dp must be >= 1: got " + std::to_string(o.dp));
  need(!(o.no_pipeline && o.dp > 1), "--no-pipeline trains one replica on one rank: got --dp=" + std::to_string(o.dp) +
                                         " (give it microbatches * dp microbatches for the same batch)");
  need(o.zero_stage == 0 || o.zero_stage == 1,
       "--zero must be 0 or 1: got " + std::to_string(o.zero_stage) +
           " (ZeRO-2/3, which also shard gradients and parameters, are not implemented)");
  need(!(o.no_pipeline && (!o.save_dir.empty() || !o.resume.empty())),
       "--no-pipeline trains the reference without checkpoints: drop --save-dir / --resume (--init-from loads weights)");
  need(o.init_from.empty() || o.resume.empty(), "give --init-from (weights only) or --resume (the whole state), not both");
  need(o.save_every >= 0, "--save-every must be >= 0 (0 = only after the last step): got " + std::to_string(o.save_every));
  need(o.keep_last >= 0, "--keep-last must be >= 0 (0 = keep all): got " + std::to_string(o.keep_last));
  // Without a folder nothing is saved: a run given these believed it checkpointed.
  need(!(o.save_dir.empty() && o.save_every != 0),
       "--save-every " + std::to_string(o.save_every) + " needs --save-dir (the folder to checkpoint into)");
  need(!(o.save_dir.empty() && o.keep_last != 0),
       "--keep-last " + std::to_string(o.keep_last) + " needs --save-dir (the folder whose checkpoints it keeps)");

  // Below 1 KiB a step sends a message per few floats (1e-6 ran a step for minutes).
  need(o.bucket_mb * 1024 >= 1 && o.bucket_mb <= 4096,
       "--bucket-mb must be in [1/1024, 4096] (1 KiB to 4 GiB): got " + number_text(o.bucket_mb));
}

namespace {

// A plan whose virtual stages run their backwards out of microbatch order trains other bits
// (by rounding) than the built-in schedules: said once, naming where the plan came from.
void warn_of_backward_order(const plan& p, const std::string& source) {
  const std::string order = backward_order_note(p);
  if (!order.empty())
    log_warn(source + ": " + order +
             "; gradients add up in that order, so the run's numbers differ (by rounding) from a plan's in microbatch "
             "order, as every built-in schedule runs them");
}

// A --data-file the model does not read is refused; other model flags it does not follow are
// said once (a user's model may well read them without listing them).
void check_flags_followed(const model_definition& model, const train_options& o) {
  const auto follows = [&model](const std::string& flag) {
    return std::find(model.flags_followed.begin(), model.flags_followed.end(), flag) != model.flags_followed.end();
  };
  const std::string listed = " (model_definition::flags_followed)";
  const std::string& name = o.model_name.empty() ? model.name : o.model_name;  // as --model names it
  if (o.data == "file" && !follows("--data-file"))
    throw std::invalid_argument("--data-file " + o.data_file + ": model '" + name + "' does not read a data file" +
                                listed + "; its data: " +
                                (model.data_description.empty() ? std::string("its own") : model.data_description));
  // Nor evaluation data (a library caller's train_options reach here without the command line's checks).
  const std::pair<std::string, std::string> eval_flags[] = {
      {"--eval-file", o.text.eval_file.empty() ? std::string() : "--eval-file " + o.text.eval_file},
      {"--eval-split", o.eval_split == 0 ? std::string() : "--eval-split " + number_text(o.eval_split)}};
  for (const auto& [flag, given] : eval_flags)
    if (!given.empty() && !follows(flag))
      throw std::invalid_argument(given + ": model '" + name + "' does not read it" + listed +
                                  "; a model of yours gives its eval set as model_definition::eval_data");
  std::string ignored;
  int count = 0;
  for (const auto& flag : o.model_flags_given)
    if (flag != "--data-file" && flag != "--eval-file" && flag != "--eval-split" && !follows(flag))
      ignored += (count++ ? ", " : "") + flag;
  if (count)
    log_warn(ignored + (count == 1 ? " is" : " are") + " given, and model '" + name + "' does not say it follows " +
             (count == 1 ? "it" : "them") + listed + ": " + (count == 1 ? "it" : "they") + " may do nothing");
}

// Where evaluation data comes from, for the errors of a run that asks for a pass without it.
const char* const eval_data_hint =
    "(--eval-file: bert's GLUE dev TSV, the gpt's held-out token file; the gpt on synthetic data holds out its own; "
    "a model of yours: model_definition::eval_data)";

}  // namespace

run_setup prepare_run(const train_options& o, const chunk_factory& make_chunk, const std::function<bool(int rank)>& build_rank) {
  check_train_options(o);
  run_setup s;
  // The ranks this process runs, before the model is made (its size check counts them).
  const int P = o.no_pipeline ? 1 : o.stages, V = o.no_pipeline ? 1 : o.chunks, M = o.microbatches;
  int ranks_here = 0;
  for (int r = 0; r < P * (o.no_pipeline ? 1 : o.dp); ++r) ranks_here += !build_rank || build_rank(r);
  train_options here = o;
  here.ranks_in_process = ranks_here;
  if (o.eval_microbatches < 0)
    throw std::invalid_argument("--eval-microbatches=" + std::to_string(o.eval_microbatches) + " must be >= 0");
  model_definition made = make_model(here);
  const std::string called = o.model_name.empty() ? made.name : o.model_name;  // as --model names it
  if (o.eval_microbatches > 0) {  // the first N of the model's eval set
    if (!made.eval_data || made.eval_microbatches == 0)
      throw std::invalid_argument("--eval-microbatches=" + std::to_string(o.eval_microbatches) + " needs evaluation data " +
                                  eval_data_hint + ", and model '" + called + "' has none");
    if (o.eval_microbatches > made.eval_microbatches)
      throw std::invalid_argument("--eval-microbatches=" + std::to_string(o.eval_microbatches) + " is more than the " +
                                  std::to_string(made.eval_microbatches) + " microbatches of model '" + called +
                                  "''s eval set");
    made.eval_microbatches = o.eval_microbatches;
  }
  auto model = std::make_shared<const model_definition>(std::move(made));
  s.model = model;
  check_flags_followed(*model, o);
  const int L = static_cast<int>(model->layers.size());
  // Before a plan or a policy per rank is made (for 100000 stages that took minutes).
  if (!o.no_pipeline) {
    const long long stage_count = static_cast<long long>(P) * V;
    if (o.model_name == "gpt" && o.partition.empty() && o.model.layers < stage_count)  // its default gives each a block
      throw std::invalid_argument("--layers=" + std::to_string(o.model.layers) + " cannot be split over stages*chunks=" +
                                  std::to_string(stage_count) + " virtual stages (the default partition gives each a block; " +
                                  "--partition uniform cuts all " + std::to_string(L) + " layers, embeddings and head included)");
    if (L < stage_count)
      throw std::invalid_argument("the model's " + std::to_string(L) + " layers cannot be split over stages*chunks=" +
                                  std::to_string(stage_count) + " virtual stages (each needs at least one layer)");
  }
  if (o.no_pipeline) {
    s.place = loop_placement(1, 1);
    s.policy = "greedy";  // one rank, no plan: F and B of each microbatch in turn
  } else if (!o.schedule_file.empty()) {
    plan p = o.schedule_text ? parse_plan(*o.schedule_text, o.schedule_file) : load_plan_file(o.schedule_file);
    require_plan_file_count(o.schedule_file, "stages (--stages, or pp in a config)", P, p.num_ranks());
    require_plan_file_count(o.schedule_file, "chunks (--chunks, or chunks in a config)", V, p.chunks());
    require_plan_file_count(o.schedule_file, "microbatches (--microbatches, or --batch-size over --microbatch-size)", M,
                            p.microbatches);
    require_valid(p);
    warn_of_backward_order(p, "schedule file '" + o.schedule_file + "'");
    s.place = p.place;
    s.static_plan = std::make_shared<const plan>(std::move(p));
  } else if (is_dynamic_policy(o.schedule)) {
    s.place = policy_placement(o.schedule, P, V);
    s.policy = o.schedule;
    make_policies(s.policy, P, M, V, o.greedy_budget);  // a policy that refuses the request says so now
  } else {
    plan p = make_schedule(o.schedule, {P, M, V});
    warn_of_backward_order(p, "schedule '" + o.schedule + "'");  // a user's generator (the built-ins keep the order)
    s.place = p.place;
    s.static_plan = std::make_shared<const plan>(std::move(p));
  }
  const int S = s.place.num_virtual_stages();
  for (const auto& l : model->layers) s.layer_names.push_back(l.name);
  // The reference runs the model whole: a partition given for the pipeline it is compared
  // with is not its own (counts for 2 stages were refused against its 1).
  s.partition = o.partition.empty() || o.no_pipeline ? model->default_partition : o.partition;
  bool other_processes = false;
  for (int r = 0; build_rank && r < s.place.ranks; ++r) other_processes = other_processes || !build_rank(r);
  // Before anything sets the thread count (the profile below, each rank's compute thread).
  require_thread_room(ranks_here, o.threads_per_stage, s.partition == "profile" && S > 1 ? 1 : 0);
  if (s.partition == "profile" && other_processes)
    throw std::invalid_argument(
        "--partition profile measures the layers in one process, and the processes of a job could measure different "
        "splits: run it once in one process and give the split it prints as --partition counts:A,B,...");
  try {
    if (S == 1) {
      partition_layers(s.partition, s.layer_names, 1, 1, [&] { return std::vector<double>(L, 1.0); },
                       [&] { return std::vector<double>(L, 1.0); });  // the method is still checked
      s.layers = {{0, L}};
    } else {
      std::optional<built_layers> built;  // the whole model, built once if a method looks at it
      auto all = [&]() -> const built_layers& {
        if (!built) built = build_all_layers(*model);
        return *built;
      };
      s.layers = partition_layers(
          s.partition, s.layer_names, P, V, [&] { return layer_parameter_counts(*model, all()); },
          [&] {
            // On a thread of its own at the run's thread count, as a rank computes: the calling
            // thread keeps its own (putting a caller's OMP_NUM_THREADS=1000 back remade
            // LibTorch's thread pool with 1000 spinning threads, 45 s on 2 cores).
            const built_layers& layers = all();
            std::vector<double> costs;
            std::exception_ptr failed;
            std::thread profiler([&] {
              try {
                set_compute_threads(o.threads_per_stage);
                costs = profile_layers(*model, layers);
              } catch (...) {
                failed = std::current_exception();
              }
            });
            profiler.join();
            if (failed) std::rethrow_exception(failed);
            if (log_enabled(log_level::debug)) {
              std::string line = "partition profile: forward + backward per layer, one microbatch (ms):";
              for (std::size_t i = 0; i < costs.size(); ++i) {
                char ms[32];
                std::snprintf(ms, sizeof ms, " %.2f", 1e3 * costs[i]);
                line += (i ? "," : "") + (" " + s.layer_names[i]) + ms;
              }
              log_debug(line);
            }
            return costs;
          });
    }
  } catch (const std::invalid_argument& e) {
    // The model's own default failed: say so, not "--partition", which the user never gave.
    const std::string flag = "--partition ", what = e.what();
    if (!o.partition.empty() || what.rfind(flag, 0) != 0) throw;
    throw std::invalid_argument("model '" + model->name + "': its default_partition " + what.substr(flag.size()) +
                                " (no --partition was given: give one to cut the model another way)");
  }
  // Tie keys spanning virtual stages.
  std::map<std::string, std::vector<int>> holders;
  for (int v = 0; v < S; ++v)
    for (int i = s.layers[v].start; i < s.layers[v].end; ++i) {
      const std::string& key = model->layers[i].tie_key;
      if (key.empty()) continue;
      auto& h = holders[key];
      if (h.empty() || h.back() != v) h.push_back(v);
    }
  for (auto& [key, stages] : holders)
    if (stages.size() > 1) s.ties.push_back({key, stages});
  s.data = model->data;
  s.eval_data = model->eval_data;
  s.eval_microbatches = model->eval_data ? model->eval_microbatches : 0;
  if (o.eval_every < 0) throw std::invalid_argument("--eval-every=" + std::to_string(o.eval_every) + " must be >= 0");
  if (o.eval_every > 0 && s.eval_microbatches == 0)
    throw std::invalid_argument("--eval-every=" + std::to_string(o.eval_every) + " needs evaluation data " + eval_data_hint +
                                ", and model '" + called + "' has none" +
                                (model->eval_data ? " (its eval_data is set, but eval_microbatches=" +
                                                        std::to_string(model->eval_microbatches) + ")"
                                                  : std::string()));
  s.data_description = model->data_description.empty() ? "model '" + model->name + "' data" : model->data_description;
  s.tokens_per_sample = model->tokens_per_sample;
  s.greedy_budget = o.greedy_budget;
  adamw_options adamw;
  adamw.beta1 = o.adam_beta1;
  adamw.beta2 = o.adam_beta2;
  adamw.eps = o.adam_eps;
  adamw.weight_decay = o.weight_decay;
  s.grid = make_rank_grid(P, o.dp);
  const long long bucket_elements = std::max(1LL, static_cast<long long>(o.bucket_mb * (1 << 20) / sizeof(float)));
  for (int d = 0; d < s.grid.replicas; ++d)
    for (int v = 0; v < S; ++v) {
      chunk_spec spec;
      spec.virtual_stage = v;
      spec.layer_begin = s.layers[v].start;
      spec.layer_end = s.layers[v].end;
      spec.first = v == 0;
      spec.last = v + 1 == S;
      spec.activation_checkpointing = o.activation_checkpointing;
      s.optimizers.push_back(nullptr);
      s.dp_optimizers.push_back(nullptr);
      if (build_rank && !build_rank(s.grid.rank(d, s.place.rank_of[v]))) {
        s.runners.push_back(nullptr);
        continue;
      }
      auto runner = make_chunk ? make_chunk(spec) : std::make_shared<layer_chunk>(model, spec);
      s.runners.push_back(runner);
      auto params = runner->named_parameters();
      if (s.grid.replicas == 1) {
        s.optimizers.back() = std::make_shared<shard_optimizer>(params, adamw);
        continue;
      }
      std::vector<long long> sizes;
      for (auto& [name, t] : params) sizes.push_back(unbox(t).numel());
      s.dp_optimizers.back() = std::make_shared<data_parallel_optimizer>(
          params, make_flat_layout(sizes, s.grid.replicas, bucket_elements), d, o.zero_stage, adamw, runner->tied_copies());
    }
  // A name two virtual stages both hold (outside a tie) would train as two tensors and then
  // fail when they are saved under one name; one tensor in two stages (a build function that
  // hands out a module it built once) would be stepped by both: refused now, naming both (among
  // the stages this process holds; a stage checks its own layers itself, and process 0 the
  // names of the whole job as it forms).
  if (const std::string clash = held_name_clash(held_names(s.runners, S, 0), s.grid.replicas, 1); !clash.empty())
    throw std::invalid_argument(clash);
  std::map<const void*, std::pair<std::string, int>> storage;     // data -> (name, runner)
  const auto where = [&](int runner) {  // runners are replica-major
    return "virtual stage " + std::to_string(runner % S) +
           (s.grid.replicas > 1 ? " of replica " + std::to_string(runner / S) : std::string());
  };
  for (int k = 0; k < static_cast<int>(s.runners.size()); ++k) {
    if (!s.runners[k]) continue;
    // A module's own names (register_parameter / register_buffer) go into the files too.
    for (const auto& [name, t] : saved_tensors(*s.runners[k])) {
      if (const std::string why = unstorable_name_reason(name); !why.empty())
        throw std::invalid_argument("a tensor of " + where(k) + ": its name " + why);
      // Checkpoints name a data-parallel replica's copies of its buffers "replica<N>/<name>":
      // a tensor named so trained and saved, and its files then did not load ("1 missing").
      if (without_replica(name) != name)
        throw std::invalid_argument("a tensor of " + where(k) + ": its name '" + name + "' begins as checkpoints name a "
                                    "data-parallel replica's copies of its buffers ('replica<N>/'), so its files would "
                                    "not load: give its layer another name or param_prefix");
    }
    for (const auto& [name, t] : s.runners[k]->named_parameters()) {
      const at::Tensor& tensor = unbox(t);
      if (tensor.numel() == 0) continue;
      const auto [at, first] = storage.emplace(tensor.data_ptr(), std::make_pair(name, k));
      if (!first && at->second.second != k)
        throw std::invalid_argument("parameter '" + name + "' of " + where(k) + " is the tensor of '" + at->second.first +
                                    "' on " + where(at->second.second) +
                                    ": a layer's build function returns a module it built once (build a new one per "
                                    "call; to share weights across layers, give them a tie_key)");
    }
  }
  return s;
}

std::vector<held_name> held_names(const std::vector<std::shared_ptr<chunk_compute>>& runners, int stages, int process) {
  std::vector<held_name> out;
  for (int k = 0; k < static_cast<int>(runners.size()); ++k) {
    if (!runners[k]) continue;
    const auto saved = saved_tensors(*runners[k]);
    const std::size_t parameters = saved.size() - runners[k]->named_buffers().size();  // the buffers come last
    for (std::size_t i = 0; i < saved.size(); ++i)
      out.push_back({saved[i].first, k / stages, k % stages, process, i >= parameters});
  }
  return out;
}

std::vector<std::pair<std::string, tensor_box>> collect_parameters(const std::vector<std::shared_ptr<chunk_compute>>& runners) {
  std::vector<std::pair<std::string, tensor_box>> out;
  for (size_t v = 0; v < runners.size(); ++v)
    if (runners[v])
      for (auto& t : saved_tensors(*runners[v])) out.push_back(std::move(t));
  return out;
}

sim_result predict_from_measured(const run_setup& setup, const sim_result& measured, const plan* ran) {
  const cost_model costs = mean_costs(measured.events, setup.place.num_virtual_stages());
  if (ran) return simulate(*ran, costs);
  if (setup.static_plan) return simulate(*setup.static_plan, costs);
  auto policies = make_policies(setup.policy, setup.place.ranks, measured.microbatches, setup.place.chunks(),
                                setup.greedy_budget);
  return simulate_policies(setup.place, measured.microbatches, policies, costs, setup.policy).timeline;
}

int replan_step(const train_options& o) {
  if (!o.plan_on_measured_costs || o.no_pipeline || !o.schedule_file.empty() || is_dynamic_policy(o.schedule)) return -1;
  if (o.steps < 2) return -1;
  // The first step: its first forwards pay for first-touch allocations (up to 2x the steady
  // cost here), but the plan is built on each op's median, which those few do not move.
  return 1;
}

std::vector<int> ranks_over_processes(const train_options& o, int processes, const std::vector<int>& per_process) {
  if (o.no_pipeline) return assign_ranks_to_processes(1, processes, per_process);
  const int ranks = o.stages * o.dp;
  const std::string text = o.dp == 1 ? "" : "--stages x --dp = " + std::to_string(o.stages) + " x " + std::to_string(o.dp) + " = " + std::to_string(ranks);
  return assign_ranks_to_processes(ranks, processes, per_process, text);
}

}  // namespace actorpipe
