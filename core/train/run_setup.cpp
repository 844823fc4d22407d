// Validating train_options and building the pieces of a run.
#include "core/train/run_setup.hpp"
#include "core/number_text.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/schedule/plan_validator.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/policy_simulator.hpp"

namespace actorpipe {
namespace {

void need(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}


void check_options(const train_options& o) {
  need(o.stages >= 1, "--stages must be >= 1: got " + std::to_string(o.stages));
  need(o.chunks >= 1, "--chunks must be >= 1: got " + std::to_string(o.chunks));
  need(o.microbatches >= 1, "--microbatches must be >= 1: got " + std::to_string(o.microbatches));
  need(o.microbatch_size >= 1, "--microbatch-size must be >= 1: got " + std::to_string(o.microbatch_size));
  need(o.steps >= 1, "--steps must be >= 1: got " + std::to_string(o.steps));
  need(o.threads_per_stage >= 1, "--threads-per-stage must be >= 1: got " + std::to_string(o.threads_per_stage));
  need(o.lr > 0, "--lr must be > 0: got " + number_text(o.lr));
  need(o.warmup_steps >= 0, "--warmup-steps must be >= 0: got " + std::to_string(o.warmup_steps));
  need(o.grad_clip >= 0, "--grad-clip must be >= 0 (0 = off): got " + number_text(o.grad_clip));
  need(o.weight_decay >= 0, "--weight-decay must be >= 0: got " + number_text(o.weight_decay));
  need(o.step_timeout_s > 0, "--step-timeout must be > 0 seconds: got " + number_text(o.step_timeout_s));
  need(o.greedy_budget >= 0, "--budget must be >= 0 (0 = stages - rank): got " + std::to_string(o.greedy_budget));
  const gpt_config& m = o.model;
  need(m.vocab >= 2, "--vocab must be >= 2: got " + std::to_string(m.vocab));
  need(m.seq_len >= 1, "--seq-len must be >= 1: got " + std::to_string(m.seq_len));
  need(m.hidden >= 1, "--hidden must be >= 1: got " + std::to_string(m.hidden));
  need(m.heads >= 1, "--heads must be >= 1: got " + std::to_string(m.heads));
  need(m.hidden % m.heads == 0,
       "--hidden must be a multiple of --heads: got hidden=" + std::to_string(m.hidden) + ", heads=" + std::to_string(m.heads));
  need(m.layers >= 1, "--layers must be >= 1: got " + std::to_string(m.layers));
  need(o.data == "synthetic" || o.data == "file", "--data must be synthetic or a file: got '" + o.data + "'");
}

}  // namespace

std::shared_ptr<const token_source> open_source(const train_options& o) {
  if (o.data == "synthetic") return make_synthetic_source(o.model.vocab, o.data_seed);
  const std::int64_t need_tokens = static_cast<std::int64_t>(o.model.seq_len) + 1;
  const std::string& p = o.data_file;
  if (p.size() >= 4 && p.compare(p.size() - 4, 4, ".bin") == 0) return open_token_file(p, o.model.vocab, need_tokens);
  need(o.model.vocab >= 256, "--data-file '" + p + "' is read as UTF-8 bytes, which needs --vocab >= 256: got " +
                                 std::to_string(o.model.vocab));
  return open_text_file(p, need_tokens);
}

run_setup prepare_run(const train_options& o, const chunk_factory& make_chunk, const std::function<bool(int rank)>& build_rank) {
  check_options(o);
  run_setup s;
  const int P = o.no_pipeline ? 1 : o.stages, V = o.no_pipeline ? 1 : o.chunks, M = o.microbatches;
  if (o.no_pipeline) {
    s.place = loop_placement(1, 1);
    s.policy = "greedy";  // one rank, no plan: F and B of each microbatch in turn
  } else if (!o.schedule_file.empty()) {
    plan p = load_plan_file(o.schedule_file);
    auto mismatch = [&](const char* flag, int given, int in_file) {
      need(given == in_file, std::string(flag) + "=" + std::to_string(given) + " but schedule file '" + o.schedule_file +
                                 "' has " + std::to_string(in_file));
    };
    mismatch("--stages", P, p.num_ranks());
    mismatch("--chunks", V, p.chunks());
    mismatch("--microbatches", M, p.microbatches);
    require_valid(p);
    s.place = p.place;
    s.static_plan = std::make_shared<const plan>(std::move(p));
  } else if (is_dynamic_policy(o.schedule)) {
    s.place = policy_placement(o.schedule, P, V);
    s.policy = o.schedule;
    make_policies(s.policy, P, M, V, o.greedy_budget);  // a policy that refuses the request says so now
  } else {
    plan p = make_schedule(o.schedule, {P, M, V});
    s.place = p.place;
    s.static_plan = std::make_shared<const plan>(std::move(p));
  }
  const int S = s.place.num_virtual_stages();
  if (o.model.layers < S)
    throw std::invalid_argument("--layers=" + std::to_string(o.model.layers) + " cannot be split over stages*chunks=" +
                                std::to_string(S) + " virtual stages (each needs at least one layer)");
  s.blocks = layer_ranges(distribute_layers(o.model.layers, P, V));
  s.source = open_source(o);
  s.greedy_budget = o.greedy_budget;
  adamw_options adamw;
  adamw.weight_decay = o.weight_decay;
  for (int v = 0; v < S; ++v) {
    chunk_spec spec;
    spec.virtual_stage = v;
    spec.block_begin = s.blocks[v].start;
    spec.block_end = s.blocks[v].end;
    spec.first = v == 0;
    spec.last = v + 1 == S;
    spec.activation_checkpointing = o.activation_checkpointing;
    if (build_rank && !build_rank(s.place.rank_of[v])) {
      s.runners.push_back(nullptr);
      s.optimizers.push_back(nullptr);
      continue;
    }
    s.runners.push_back(make_chunk ? make_chunk(o.model, spec) : std::make_shared<chunk_runner>(o.model, spec));
    s.optimizers.push_back(std::make_shared<shard_optimizer>(s.runners.back()->named_parameters(), adamw));
  }
  return s;
}

std::vector<std::pair<std::string, tensor_box>> collect_parameters(const std::vector<std::shared_ptr<chunk_compute>>& runners) {
  std::vector<std::pair<std::string, tensor_box>> out;
  for (size_t v = 0; v < runners.size(); ++v) {
    if (!runners[v]) continue;
    for (auto& [name, t] : runners[v]->named_parameters())
      if (!(v > 0 && v + 1 == runners.size() && name == "tok_emb.weight")) out.emplace_back(name, t);
  }
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
  // The first step: it pays for first-touch allocations, but about alike in every action, and
  // the plan needs the costs' proportions (measured: the next step's bubble is as small as
  // when step 2 is measured).
  return 1;
}

}  // namespace actorpipe
