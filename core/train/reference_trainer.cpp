// Reference trainer: the whole model as one chunk on a thread of its own; per step, every
// microbatch's forward and backward in order (gradient accumulation), then clip and AdamW.
#include "core/train/reference_trainer.hpp"

#include "core/model/layer_model.hpp"
#include "core/train/evaluation.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/microbatch.hpp"
#include "core/model/chunk_compute.hpp"
#include "core/model/compute_threads.hpp"
#include "core/log.hpp"
#include "core/model/error_text.hpp"
#include "core/number_text.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/run_setup.hpp"
#include "core/train/run_state.hpp"

namespace actorpipe {

namespace {

// What a user's data, layers or loss throw once training has begun: one std::runtime_error
// (exit 1, as in the pipeline: the run had started; a certain_failure stays one, exit 2),
// saying where (`what`: "the data of step 2, microbatch 3"; empty where the message names it
// already), whatever was thrown.
template <typename F>
auto once_begun(const std::string& what, F&& run) -> decltype(run()) {
  try {
    return run();
  } catch (const std::exception& e) {
    throw_as(e, what.empty() ? error_text(e) : error_text(e) + " (" + what + ")");
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

// Where the reference's thread is, for the caller's step deadline, and the callbacks it may
// still call: once the caller has given up on it (abandoned), it calls none, and reads
// nothing of the caller's (the stop signal) again.
struct reference_progress {
  std::atomic<int> step{0};  // the step (0-based) in flight, or the one whose evaluation runs
  std::atomic<bool> in_eval{false};
  std::atomic<double> since{0};  // steady clock seconds when it began
  std::atomic<bool> in_callback{false};  // the caller's own code runs: no deadline (as in the pipeline)
  std::mutex callbacks;           // held while a callback runs, and to abandon the thread
  bool abandoned = false;         // under `callbacks`
  std::mutex done_mutex;
  std::condition_variable done_signal;
  bool done = false;  // under done_mutex
  std::exception_ptr error;
  train_result result;
  std::function<void(const step_metrics&)> on_step;
  std::function<void(const eval_record&)> on_eval;
};

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The steps, on the calling thread (the reference's own).
train_result train_reference(const train_options& o, reference_progress& p) {
  // What runs under `callbacks`: false (nothing run) when the caller has given up on this thread.
  // The callback's time is not the step's: the deadline counts from its end (a slow on_step
  // failed the next step, "still in the model's or the data's code").
  const auto with_caller = [&p](auto&& run) {
    std::lock_guard<std::mutex> lock(p.callbacks);
    if (p.abandoned) return false;
    p.in_callback.store(true);
    struct restart_clock {
      reference_progress& p;
      ~restart_clock() {
        p.since.store(steady_seconds());
        p.in_callback.store(false);
      }
    } clock{p};
    run();
    return true;
  };
  const auto& on_step = p.on_step;
  const auto& on_eval = p.on_eval;
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
    p.step.store(k), p.in_eval.store(false), p.since.store(steady_seconds());
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
    sm.lr = lr_at(k, o.lr, o.warmup_steps, o.steps, o.min_lr_ratio, parse_lr_decay(o.lr_decay_style), o.lr_decay_steps);
    const double coef = clip_coefficient(sm.grad_norm, o.grad_clip);
    opt.step(sm.lr, coef);  // <= 1: 1 reads the gradients as they are
    opt.zero_grad();
    // The parameters this step leaves are kept (the run's end, a stop asked for, an evaluation
    // pass), as the pipeline's shards check them: an update can overflow where the loss and
    // the norm were still finite.
    const bool kept = k + 1 >= o.steps || (s.model->eval_microbatches > 0 && eval_due(o, k + 1)) ||
                      (o.stop_signal && o.stop_signal->load() != 0);
    if (kept)
      if (const std::string bad = opt.nonfinite_parameter(); !bad.empty()) throw std::runtime_error(nonfinite_update_error(k, bad));
    sm.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sm.tokens_per_s = sm.seconds > 0 ? double(M) * o.microbatch_size * s.tokens_per_sample / sm.seconds : 0;
    sm.peak_activations = {1};
    keep_step(result.steps, sm, o.keep_step_metrics);
    if (!with_caller([&] {
          if (on_step) hook("on_step", k + 1, [&] { on_step(sm); });
        }))
      return result;
    // A stop asked for (with steps left) ends the run after this step, records its signal.
    const auto stops = [&] {
      with_caller([&] {
        const int signal = o.stop_signal ? o.stop_signal->load() : 0;
        if (signal != 0 && k + 1 < o.steps) result.stopped_by_signal = signal;
      });
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
      p.in_eval.store(true), p.since.store(steady_seconds());
      const auto t1 = std::chrono::steady_clock::now();
      // A pass that fails keeps what the run trained (train_result::eval_error), as the
      // pipeline's supervisor does.
      eval_record e;
      try {
        std::vector<eval_piece> pieces;
        for (int m = 0; m < s.model->eval_microbatches; ++m) {
          const microbatch_tensors mt =
              once_begun("the data of evaluation microbatch " + std::to_string(m), [&] { return s.model->eval_data(0, m); });
          pieces.push_back(once_begun("evaluation microbatch " + std::to_string(m),
                                      [&] { return make_eval_piece(*s.model, runner.evaluate(m, mt.inputs), mt.targets); }));
        }
        e = once_begun("", [&] { return summarize_eval(*s.model, k + 1, pieces); });
      } catch (const std::exception& x) {
        result.eval_error = "the evaluation after step " + std::to_string(k + 1) + ": " + error_text(x);
        log_error(result.eval_error + ": the run stops after step " + std::to_string(k + 1) + ", keeping what it trained");
        break;
      }
      e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      if (!with_caller([&] {
            if (on_eval) hook("on_eval", k + 1, [&] { on_eval(e); });
          }))
        return result;
      result.evals.push_back(std::move(e));
      if (stops()) break;  // one asked for during the pass: no further step
    }
  }
  result.parameters = collect_parameters(s.runners);
  return result;
}

}  // namespace

// On a thread of its own (its LibTorch thread settings are its own, not the caller's), which
// the caller watches: a step (or an evaluation pass) that outlasts step_timeout_s ends the run
// with an error, and the thread, stuck in the model's or the data's code, is left to finish
// or to the process's exit (it calls no callback and reads nothing of the caller's after).
train_result run_reference(const train_options& options, const std::function<void(const step_metrics&)>& on_step,
                           const std::function<void(const eval_record&)>& on_eval) {
  train_options o = options;
  o.no_pipeline = true;
  check_train_options(o);  // before a thread: a bad step_timeout_s is refused, not waited on
  refuse_inference_mode();
  const caller_torch_state caller;  // its generator and thread count, put back at the end
  auto p = std::make_shared<reference_progress>();
  p->on_step = on_step;
  p->on_eval = on_eval;
  p->since.store(steady_seconds());
  std::thread worker([p, o] {
    try {
      p->result = train_reference(o, *p);
    } catch (...) {
      p->error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(p->done_mutex);
    p->done = true;
    p->done_signal.notify_all();
  });
  const auto tick = std::chrono::duration<double>(std::clamp(o.step_timeout_s / 10, 0.001, 0.2));
  std::unique_lock<std::mutex> lock(p->done_mutex);
  while (!p->done) {
    p->done_signal.wait_for(lock, tick);
    if (p->done || p->in_callback.load() || steady_seconds() - p->since.load() <= o.step_timeout_s) continue;
    lock.unlock();
    {
      std::lock_guard<std::mutex> callbacks(p->callbacks);  // not in the middle of a callback
      p->abandoned = true;
    }
    lock.lock();
    // Given up on: it calls no callback from here, so what it returns lacks steps; the run
    // failed either way (it may have finished meanwhile).
    if (p->done) {
      lock.unlock();
      worker.join();
    } else {
      worker.detach();
    }
    const int k = p->step.load();
    throw std::runtime_error(
        (p->in_eval.load() ? "the evaluation pass after step " + std::to_string(k + 1)
                           : "step " + std::to_string(k + 1) + " of " + std::to_string(o.steps)) +
        " did not finish within " + number_text(o.step_timeout_s) +
        " s (--step-timeout): the unpipelined run's one thread is still in the model's or the data's code; it is left "
        "to finish, or to the process's exit");
  }
  lock.unlock();
  worker.join();
  if (p->error) std::rethrow_exception(p->error);
  return std::move(p->result);
}

}  // namespace actorpipe
