// Reference trainer: the whole model as one chunk on the calling thread; per step, every
// microbatch's forward and backward in order (gradient accumulation), then clip and AdamW.
#include "core/train/reference_trainer.hpp"

#include "core/model/layer_model.hpp"
#include "core/train/evaluation.hpp"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/microbatch.hpp"
#include "core/model/compute_threads.hpp"
#include "core/log.hpp"
#include "core/model/error_text.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/run_setup.hpp"
#include "core/train/run_state.hpp"

namespace actorpipe {

namespace {

// What a user's data, layers or loss throw once training has begun: one std::runtime_error
// (exit 1, as in the pipeline: the run had started), saying where (`what`: "the data of step 2,
// microbatch 3"; empty where the message names it already), whatever was thrown.
template <typename F>
auto once_begun(const std::string& what, F&& run) -> decltype(run()) {
  try {
    return run();
  } catch (const std::exception& e) {
    throw std::runtime_error(what.empty() ? error_text(e) : error_text(e) + " (" + what + ")");
  } catch (...) {
    throw std::runtime_error("an exception that is not a std::exception" + (what.empty() ? std::string() : " (" + what + ")"));
  }
}

// A caller's callback: what it throws stops the run naming it, as the pipeline's supervisor says.
template <typename F>
void hook(const char* name, int after_step, F&& run) {
  const std::string where = std::string("the ") + name + " callback after step " + std::to_string(after_step) + " threw";
  try {
    run();
  } catch (const std::exception& e) {
    throw std::runtime_error(where + ": " + error_text(e));
  } catch (...) {
    throw std::runtime_error(where + " an exception that is not a std::exception");
  }
}

}  // namespace

train_result run_reference(const train_options& options, const std::function<void(const step_metrics&)>& on_step,
                           const std::function<void(const eval_record&)>& on_eval) {
  train_options o = options;
  o.no_pipeline = true;
  run_setup s = prepare_run(o);
  if (!o.init_from.empty()) init_from_weights(s, o);
  set_compute_threads(o.threads_per_stage);
  chunk_compute& runner = *s.runners.front();
  shard_optimizer& opt = *s.optimizers.front();
  const int M = o.microbatches;
  train_result result;
  result.data_description = s.data_description;
  result.partition = s.partition;
  result.split = describe_partition(s.layers, s.layer_names);
  for (int k = 0; k < o.steps; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    double loss = 0;
    std::vector<double> losses(M);
    for (int m = 0; m < M; ++m) {
      microbatch_tensors mt = once_begun("the data of step " + std::to_string(k + 1) + ", microbatch " + std::to_string(m),
                                         [&] { return s.data(static_cast<std::uint64_t>(k), m); });
      // The step, as the pipeline's errors name it ("rank 1, step 2: F1.2 failed: ...").
      const std::string step = "step " + std::to_string(k + 1);
      losses[m] = once_begun(step, [&] { return runner.forward(m, mt.inputs, mt.targets, 1.0 / M).loss; });
      loss += losses[m];
      once_begun(step, [&] {
        runner.backward(m, {}, false);
        return 0;
      });
    }
    step_metrics sm;
    sm.step = k;
    sm.loss = loss / M;
    sm.grad_norm = std::sqrt(opt.grad_sq_sum());
    if (const std::string why = divergence_error(k, losses, sm.grad_norm); !why.empty()) throw std::runtime_error(why);
    sm.lr = lr_at(k, o.lr, o.warmup_steps, o.steps, o.min_lr_ratio);
    const double coef = clip_coefficient(sm.grad_norm, o.grad_clip);
    opt.step(sm.lr, coef);  // <= 1: 1 reads the gradients as they are
    opt.zero_grad();
    sm.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sm.tokens_per_s = sm.seconds > 0 ? double(M) * o.microbatch_size * s.tokens_per_sample / sm.seconds : 0;
    sm.peak_activations = {1};
    result.steps.push_back(sm);
    if (on_step) hook("on_step", k + 1, [&] { on_step(sm); });
    // A stop asked for (with steps left) ends the run after this step, records its signal.
    const auto stops = [&] {
      const int signal = o.stop_signal ? o.stop_signal->load() : 0;
      if (signal != 0 && k + 1 < o.steps) result.stopped_by_signal = signal;
      return result.stopped_by_signal != 0;
    };
    const bool eval_now = s.model->eval_microbatches > 0 && eval_due(o, k + 1);
    // One asked for by now skips this step's evaluation, as the pipeline's supervisor does (it
    // hurries to its checkpoint).
    if (stops()) {
      if (eval_now) log_info("the evaluation due after step " + std::to_string(k + 1) + " is skipped: the run stops");
      break;
    }
    if (eval_now) {
      const auto t1 = std::chrono::steady_clock::now();
      std::vector<eval_piece> pieces;
      for (int m = 0; m < s.model->eval_microbatches; ++m) {
        const microbatch_tensors mt =
            once_begun("the data of evaluation microbatch " + std::to_string(m), [&] { return s.model->eval_data(0, m); });
        pieces.push_back(once_begun("", [&] { return make_eval_piece(runner.evaluate(m, mt.inputs), mt.targets); }));
      }
      eval_record e = once_begun("the evaluation after step " + std::to_string(k + 1),
                                 [&] { return summarize_eval(*s.model, k + 1, pieces); });
      e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      if (on_eval) hook("on_eval", k + 1, [&] { on_eval(e); });
      result.evals.push_back(std::move(e));
      if (stops()) break;  // one asked for during the pass: no further step
    }
  }
  result.parameters = collect_parameters(s.runners);
  return result;
}

}  // namespace actorpipe
