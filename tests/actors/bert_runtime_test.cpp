// BERT through the actor runtime: 1f1b, interleaved and zbv train it to its unpipelined run;
// the pipelined evaluation gives the unpipelined one's logits bit for bit; it learns a
// synthetic sentiment rule.
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <tuple>

#include "actors/pipeline_runtime.hpp"
#include "core/model/bert_model.hpp"
#include "core/model/layer_model.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/train/reference_trainer.hpp"
#include "tests/support/sentiment_task.hpp"
#include "tests/support/train_results.hpp"

#include <catch2/catch.hpp>

using namespace actorpipe;
using namespace actorpipe::testing;

namespace {

// A small BERT on the synthetic sentiment task, registered once as "test-bert".
model_definition test_bert(const train_options& o);

train_options bert_options(const std::string& schedule, int stages, int chunks, int steps) {
  static const bool registered = [] {
    register_model("test-bert", test_bert, "the tests' BERT on a synthetic sentiment task");
    // Evaluations that fail: a metric that throws, float targets on eval microbatch 1 (found
    // by the last stage's action).
    register_model(
        "test-bert-bad-metric",
        [](const train_options& o) {
          model_definition m = test_bert(o);
          m.eval_metrics = [](const at::Tensor&, const at::Tensor&) -> std::vector<std::pair<std::string, double>> {
            throw std::runtime_error("the metric threw on purpose");
          };
          return m;
        },
        "test-bert whose eval metric throws");
    register_model(
        "test-bert-bad-targets",
        [](const train_options& o) {
          model_definition m = test_bert(o);
          m.eval_data = [data = m.eval_data](std::uint64_t step, int microbatch) {
            microbatch_tensors t = data(step, microbatch);
            if (microbatch == 1) t.targets = box(unbox(t.targets).to(at::kFloat));
            return t;
          };
          return m;
        },
        "test-bert whose eval targets are float on microbatch 1");
    return true;
  }();
  (void)registered;
  train_options o;
  o.model_name = "test-bert";
  o.model.hidden = 32;
  o.model.heads = 2;
  o.model.layers = 4;
  o.model.seq_len = 12;
  o.model.seed = 5;
  o.data_seed = 6;
  o.schedule = schedule;
  o.stages = stages;
  o.chunks = chunks;
  o.microbatches = 4;
  o.microbatch_size = 8;
  o.steps = steps;
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  o.step_timeout_s = 120;
  return o;
}

model_definition test_bert(const train_options& o) {
  bert_config c;
  c.vocab = static_cast<int>(sentiment_vocab());
  c.hidden = o.model.hidden;
  c.heads = o.model.heads;
  c.layers = o.model.layers;
  c.intermediate = 4 * o.model.hidden;
  c.max_positions = o.model.seq_len;
  c.seed = o.model.seed;
  bert_data d;
  d.train = sentiment_encoded(sentiment_rows(200, 1), o.model.seq_len);
  d.eval = sentiment_encoded(sentiment_rows(60, 2), o.model.seq_len);
  d.pad_id = 0;
  d.cls_id = 2;
  d.seed = o.data_seed;
  d.microbatch_size = o.microbatch_size;
  d.microbatches_per_step = o.microbatches * o.dp;
  d.description = "synthetic sentiment (200 train, 60 eval rows)";
  return bert_model(c, d);
}

}  // namespace

CATCH_TEST_CASE("bert trains with 1f1b, interleaved and zbv to its unpipelined run", "[actors][bert]") {
  const train_result ref = run_reference(bert_options("1f1b", 2, 1, 4));
  CATCH_REQUIRE(ref.steps.size() == 4);
  for (auto [schedule, chunks] : std::vector<std::pair<std::string, int>>{{"1f1b", 1}, {"interleaved", 2}, {"zbv", 2}}) {
    CATCH_INFO(schedule);
    const train_result r = run_pipeline(bert_options(schedule, 2, chunks, 4));
    CATCH_REQUIRE(r.steps.size() == 4);
    for (std::size_t k = 0; k < 4; ++k) {
      CATCH_CHECK(r.steps[k].loss == Approx(ref.steps[k].loss).epsilon(1e-5));
      CATCH_CHECK(r.steps[k].grad_norm == Approx(ref.steps[k].grad_norm).epsilon(1e-5));
    }
    CATCH_CHECK(all_close(r, ref, 1e-5, 4e-5));
  }
}

CATCH_TEST_CASE("bert's pipelined evaluation gives the unpipelined evaluation's logits bit for bit", "[actors][bert][eval]") {
  // At a learning rate too small to move a float32 the parameters stay the initial ones in
  // every run, so the evaluations see the same model.
  auto tiny_lr = [](train_options o) {
    o.lr = 1e-30;
    o.eval_every = 1;
    return o;
  };
  const train_result ref = run_reference(tiny_lr(bert_options("1f1b", 2, 1, 2)));
  CATCH_REQUIRE(ref.evals.size() == 2);
  // Every eval row once, in order: 60 rows in microbatches of 8, the last with 4 rows of padding.
  CATCH_CHECK(ref.evals[0].output_shape == std::vector<std::int64_t>{64, 2});
  // The targets beside them tell the padding rows (-100) from the file's (a class index).
  CATCH_REQUIRE(ref.evals[0].targets.size() == 64);
  CATCH_CHECK(std::count(ref.evals[0].targets.begin(), ref.evals[0].targets.end(), -100) == 4);
  CATCH_CHECK(std::all_of(ref.evals[0].targets.begin(), ref.evals[0].targets.begin() + 60, [](std::int64_t t) { return t >= 0; }));
  for (auto [schedule, stages, chunks, dp] : std::vector<std::tuple<std::string, int, int, int>>{
           {"1f1b", 2, 1, 1}, {"interleaved", 2, 2, 1}, {"zbv", 2, 2, 1}, {"gpipe", 4, 1, 1}, {"1f1b", 2, 1, 2}}) {
    CATCH_INFO(schedule << " on " << stages << " stages, dp " << dp);
    train_options o = tiny_lr(bert_options(schedule, stages, chunks, 2));
    o.dp = dp;  // 2 replicas share each round's microbatches
    const train_result r = run_pipeline(o);
    CATCH_REQUIRE(r.evals.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
      CATCH_CHECK(r.evals[i].step == static_cast<int>(i) + 1);
      CATCH_CHECK(r.evals[i].output_shape == ref.evals[i].output_shape);
      CATCH_CHECK(r.evals[i].outputs == ref.evals[i].outputs);  // the same bits
      CATCH_CHECK(r.evals[i].targets == ref.evals[i].targets);
      CATCH_CHECK(r.evals[i].loss == ref.evals[i].loss);
      CATCH_CHECK(r.evals[i].metrics == ref.evals[i].metrics);
    }
  }
}

CATCH_TEST_CASE("bert learns the synthetic sentiment rule to >= 90% dev accuracy on 2 stages", "[actors][bert][eval]") {
  train_options o = bert_options("1f1b", 2, 1, 60);
  o.lr = 2e-3;
  o.warmup_steps = 5;
  o.eval_every = 20;
  const train_result r = run_pipeline(o);
  CATCH_REQUIRE(r.evals.size() == 3);
  for (const auto& e : r.evals) {
    CATCH_INFO("after step " << e.step << ": eval loss " << e.loss << ", accuracy " << e.metrics.at(0).second
                             << ", f1 " << e.metrics.at(1).second);
    CATCH_CHECK(e.metrics.at(0).first == "accuracy");
  }
  CATCH_CHECK(r.evals.back().metrics.at(0).second >= 0.9);
  CATCH_CHECK(r.evals.back().loss < r.evals.front().loss);
}

// A stop asked for during an evaluation pass ends the run after the pass (the step it followed
// is the last, its timeline kept): no further step runs to be thrown away. One asked for during
// a step skips that step's pass (the run says so) and stops after the step.
CATCH_TEST_CASE("bert: a stop during an evaluation pass ends the run after it, one during a step skips its pass",
                "[actors][bert][eval]") {
  train_options o = bert_options("1f1b", 2, 1, 4);
  o.eval_every = 1;
  std::atomic<int> stop{0};
  o.stop_signal = &stop;
  const train_result during_eval = run_pipeline(o, {}, {}, {}, [&stop](const eval_record&) { stop.store(SIGTERM); });
  CATCH_CHECK(during_eval.stopped_by_signal == SIGTERM);
  CATCH_CHECK(during_eval.steps.size() == 1);
  CATCH_CHECK(during_eval.evals.size() == 1);
  CATCH_CHECK(!during_eval.last_step.events.empty());

  // Passes after steps 2 and 4; the stop arrives by the end of step 2 (from its on_step, which
  // the supervisor asks before it checks for a stop), before its pass.
  stop.store(0);
  o.eval_every = 2;
  const train_result during_step = run_pipeline(o, [&stop](const step_metrics& m) {
    if (m.step == 1) stop.store(SIGTERM);
  });
  CATCH_CHECK(during_step.stopped_by_signal == SIGTERM);
  CATCH_CHECK(during_step.steps.size() == 2);
  CATCH_CHECK(during_step.evals.empty());  // step 2's pass skipped
  // The unpipelined run alike (it ran the pass, then stopped), and a stop asked for during its
  // pass ends it after the pass.
  stop.store(0);
  const train_result reference = run_reference(o, [&stop](const step_metrics& m) {
    if (m.step == 1) stop.store(SIGTERM);
  });
  CATCH_CHECK(reference.stopped_by_signal == SIGTERM);
  CATCH_CHECK(reference.steps.size() == 2);
  CATCH_CHECK(reference.evals.empty());
  stop.store(0);
  o.eval_every = 1;
  const train_result reference_eval = run_reference(o, {}, [&stop](const eval_record&) { stop.store(SIGTERM); });
  CATCH_CHECK(reference_eval.stopped_by_signal == SIGTERM);
  CATCH_CHECK(reference_eval.steps.size() == 1);
  CATCH_CHECK(reference_eval.evals.size() == 1);
}

// A run stopped in a step whose evaluation pass was due skips the pass; its checkpoint says so,
// and a run resumed from it makes the pass first, with the numbers the straight run's pass
// after that step had. A checkpoint whose pass ran (a periodic save) is not evaluated again.
CATCH_TEST_CASE("bert: a resumed run makes up the evaluation its checkpoint's run stopped before", "[actors][bert][eval][checkpoint]") {
  train_options o = bert_options("1f1b", 2, 1, 4);
  o.eval_every = 2;
  const train_result straight = run_pipeline(o);
  CATCH_REQUIRE(straight.evals.size() == 2);
  const std::string dir =
      std::filesystem::temp_directory_path().string() + "/actorpipe-eval-resume-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::atomic<int> stop{0};
  train_options stopping = o;
  stopping.save_dir = dir;
  stopping.stop_signal = &stop;
  const train_result stopped = run_pipeline(stopping, [&stop](const step_metrics& m) {
    if (m.step == 1) stop.store(SIGTERM);  // during step 2, before its pass
  });
  CATCH_CHECK(stopped.stopped_by_signal == SIGTERM);
  CATCH_CHECK(stopped.evals.empty());
  CATCH_REQUIRE(stopped.checkpoints.size() == 1);
  CATCH_CHECK(stopped.checkpoints[0].step == 2);

  train_options rest = o;
  rest.resume = dir;
  rest.save_dir = dir;
  rest.save_every = 2;
  const train_result resumed = run_pipeline(rest);
  CATCH_CHECK(resumed.stopped_by_signal == 0);
  CATCH_CHECK(resumed.steps.size() == 2);
  CATCH_REQUIRE(resumed.evals.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CATCH_INFO("pass " << i);
    CATCH_CHECK(resumed.evals[i].step == straight.evals[i].step);
    CATCH_CHECK(resumed.evals[i].loss == straight.evals[i].loss);
    CATCH_CHECK(resumed.evals[i].outputs == straight.evals[i].outputs);
  }

  // Its step-4 checkpoint came after the pass there: a run resumed from it (to 6 steps) has one
  // pass, after step 6. The pass made up above left the step-2 checkpoint as it was.
  train_options more = o;
  more.steps = 6;
  more.resume = dir;
  const train_result after_pass = run_pipeline(more);
  CATCH_CHECK(after_pass.steps.size() == 2);
  CATCH_REQUIRE(after_pass.evals.size() == 1);
  CATCH_CHECK(after_pass.evals[0].step == 6);
  std::filesystem::remove_all(dir);
}

// An evaluation that fails after the last step (a metric that throws, float targets met by the
// last stage's action) lost the whole run: no checkpoint of that step, no parameters for
// --save-final. The run stops after that step with what it trained, and says why.
CATCH_TEST_CASE("bert: an evaluation that fails keeps what the run trained, its checkpoint and parameters", "[actors][bert][eval][checkpoint]") {
  const train_result straight = run_pipeline(bert_options("1f1b", 2, 1, 3));
  for (const char* model : {"test-bert-bad-metric", "test-bert-bad-targets"}) {
    CATCH_INFO(model);
    const std::string dir = std::filesystem::temp_directory_path().string() + "/actorpipe-eval-fails-" +
                            std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    train_options o = bert_options("1f1b", 2, 1, 3);
    o.model_name = model;
    o.save_dir = dir;
    const train_result r = run_pipeline(o);
    CATCH_CHECK_THAT(r.eval_error, Catch::StartsWith("the evaluation after step 3: "));
    CATCH_CHECK_THAT(r.eval_error, Catch::Contains(std::string(model) == "test-bert-bad-metric"
                                                      ? "the metric threw on purpose"
                                                      : "evaluation: the targets must be int64"));
    CATCH_CHECK(r.steps.size() == 3);
    CATCH_CHECK(r.evals.empty());
    CATCH_REQUIRE(r.checkpoints.size() == 1);
    CATCH_CHECK(r.checkpoints[0].step == 3);
    CATCH_CHECK(bit_identical(r, straight));
    std::filesystem::remove_all(dir);

    o.save_dir.clear();
    o.no_pipeline = true;
    const train_result ref = run_reference(o);
    CATCH_CHECK_THAT(ref.eval_error, Catch::StartsWith("the evaluation after step 3: "));
    CATCH_CHECK(ref.steps.size() == 3);
    CATCH_CHECK(!ref.parameters.empty());
  }
}
