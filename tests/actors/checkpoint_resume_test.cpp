// Checkpoints through the runtime: a run saved at step 4 and resumed to step 10 ends bit for
// bit where a straight run does, with the same per-step losses (every schedule, and dp=2 with
// ZeRO-1);
// a checkpoint of 4 stages resumes on 2 stages x 2 chunks and on 1 stage; a damaged newest checkpoint is
// refused and the resume falls back to the one before; a checkpoint that cannot be written
// stops the run and leaves nothing of itself; a stop signal ends a run after the step in
// flight, with a checkpoint a resume goes on from.
#include <torch/torch.h>

#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>

#include "actors/pipeline_runtime.hpp"
#include "core/checkpoint/checkpoint_store.hpp"
#include "core/model/safetensors.hpp"
#include "core/train/reference_trainer.hpp"
#include "core/train/run_setup.hpp"
#include "core/train/run_state.hpp"
#include "tests/support/train_results.hpp"

#include <catch2/catch.hpp>

using namespace actorpipe;
using namespace actorpipe::testing;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& tag) {
  const std::string d = fs::temp_directory_path().string() + "/actorpipe-resume-" + tag + "-" + std::to_string(::getpid());
  fs::remove_all(d);
  return d;
}

// Steps [from, 10) of `resumed` against the same steps of `straight`: losses and norms equal.
void check_same_steps(const train_result& straight, const train_result& resumed, int from) {
  CATCH_REQUIRE(straight.steps.size() == 10);
  CATCH_REQUIRE(resumed.steps.size() == static_cast<size_t>(10 - from));
  for (int k = from; k < 10; ++k) {
    CATCH_CHECK(resumed.steps[k - from].step == k);
    CATCH_CHECK(resumed.steps[k - from].loss == straight.steps[k].loss);
    CATCH_CHECK(resumed.steps[k - from].grad_norm == straight.steps[k].grad_norm);
  }
}

}  // namespace

CATCH_TEST_CASE("4 steps, a checkpoint, and a resume to 10 end bit for bit where 10 straight steps do",
                "[actors][checkpoint]") {
  struct job { const char* schedule; int chunks, dp, zero; };
  // Every registered schedule and the dynamic policy, then data parallel with ZeRO-1.
  for (job j : {job{"gpipe", 1, 1, 0}, job{"1f1b", 1, 1, 0}, job{"interleaved", 2, 1, 0}, job{"zb-h1", 1, 1, 0},
                job{"zbv", 2, 1, 0}, job{"dualpipev", 2, 1, 0}, job{"greedy", 1, 1, 0}, job{"1f1b", 1, 2, 1}}) {
    CATCH_INFO(j.schedule << ", dp " << j.dp);
    train_options o = tiny_gpt(j.schedule, 2, j.chunks, 10);
    o.dp = j.dp;
    o.zero_stage = j.zero;
    const std::string dir = fresh_dir("same");
    train_options saving = o;  // the straight run, checkpointing every 4 steps
    saving.save_dir = dir;
    saving.save_every = 4;
    const train_result straight = run_pipeline(saving);
    std::vector<std::string> paths;
    for (const auto& c : straight.checkpoints) {  // each record: its step, its bytes as the manifest lists them
      paths.push_back(c.path);
      const checkpoint_manifest m = verify_checkpoint(c.path);
      long long bytes = 0;
      for (const auto& f : m.files) bytes += static_cast<long long>(f.bytes);
      CATCH_CHECK(c.step == m.step);
      CATCH_CHECK(c.bytes == bytes);
      CATCH_CHECK(c.pause_seconds >= 0);
      CATCH_CHECK(c.write_seconds > 0);
    }
    CATCH_REQUIRE(paths == std::vector<std::string>{dir + "/step-00000004", dir + "/step-00000008", dir + "/step-00000010"});
    CATCH_CHECK(bit_identical(straight, run_pipeline(o)));  // saving changes nothing
    if (std::string(j.schedule) == "gpipe") {
      // A library run into a folder of another run's checkpoints wrote over them (the command
      // line refused it); a save interval with no folder saved nothing, silently.
      CATCH_CHECK_THROWS_WITH(run_pipeline(saving), Contains("--save-dir '" + dir + "' holds 3 checkpoints of another run "
                                                             "(step-00000004 .. step-00000010)"));
      train_options nowhere = o;
      nowhere.save_every = 2;
      CATCH_CHECK_THROWS_WITH(run_pipeline(nowhere), Contains("--save-every 2 needs --save-dir"));
      nowhere.save_every = 0;
      nowhere.keep_last = 1;
      CATCH_CHECK_THROWS_WITH(check_train_options(nowhere), Contains("--keep-last 1 needs --save-dir"));
    }
    train_options rest = o;
    rest.resume = dir + "/step-00000004";  // as if the run had died after step 4's checkpoint
    const train_result resumed = run_pipeline(rest);
    CATCH_CHECK(resumed.resumed_from == dir + "/step-00000004");
    CATCH_CHECK(bit_identical(resumed, straight));
    check_same_steps(straight, resumed, 4);
    fs::remove_all(dir);
  }
}

CATCH_TEST_CASE("a checkpoint of 4 stages resumes on 2 stages x 2 chunks and on 1 stage like a straight run there",
                "[actors][checkpoint]") {
  const std::string dir = fresh_dir("layout");
  train_options four = tiny_gpt("1f1b", 4, 1, 10);
  four.save_dir = dir;
  four.save_every = 4;
  const train_result saved = run_pipeline(four);

  // 1f1b on 4 stages and interleaved on 2 x 2 cut the same 4 virtual stages: the same bits.
  train_options two = tiny_gpt("interleaved", 2, 2, 10);
  const train_result straight = run_pipeline(two);
  two.resume = dir + "/step-00000004";
  const train_result resumed = run_pipeline(two);
  CATCH_CHECK(bit_identical(resumed, straight));
  check_same_steps(straight, resumed, 4);

  // One stage holds the tied embedding and head in one chunk, so autograd sums their gradients
  // where 4 stages add two stages' gradients: other arithmetic, so close, not the same bits.
  train_options one = tiny_gpt("1f1b", 1, 1, 10);
  const train_result one_straight = run_pipeline(one);
  one.resume = dir + "/step-00000004";
  const train_result one_resumed = run_pipeline(one);
  CATCH_CHECK(one_resumed.resumed_from == dir + "/step-00000004");
  CATCH_CHECK(all_close(one_resumed, saved, 1e-5, 4e-5));
  CATCH_CHECK(all_close(one_resumed, one_straight, 1e-5, 4e-5));
  CATCH_REQUIRE(one_resumed.steps.size() == 6);
  for (int k = 4; k < 10; ++k) {
    CATCH_CHECK(one_resumed.steps[k - 4].step == k);
    CATCH_CHECK(one_resumed.steps[k - 4].loss == Approx(saved.steps[k].loss).epsilon(1e-5));
  }
  fs::remove_all(dir);
}

CATCH_TEST_CASE("a damaged newest checkpoint is refused and the resume falls back to the one before",
                "[actors][checkpoint]") {
  const std::string dir = fresh_dir("fallback");
  train_options o = tiny_gpt("1f1b", 2, 1, 10);
  const train_result straight = run_pipeline(o);
  train_options saving = o;
  saving.save_dir = dir;
  saving.save_every = 3;
  saving.keep_last = 2;  // older ones go only once newer ones are complete
  CATCH_REQUIRE(run_pipeline(saving).checkpoints.size() == 4);  // 3, 6, 9, 10
  CATCH_CHECK(!fs::exists(dir + "/step-00000003"));
  CATCH_CHECK(!fs::exists(dir + "/step-00000006"));
  CATCH_CHECK(fs::exists(dir + "/step-00000009"));
  fs::resize_file(dir + "/step-00000010/stage-1.safetensors", 10);
  o.steps = 10;
  train_options rest = o;
  rest.resume = dir;
  const train_result resumed = run_pipeline(rest);
  CATCH_CHECK(resumed.resumed_from == dir + "/step-00000009");
  CATCH_REQUIRE(resumed.refused.size() == 1);
  CATCH_CHECK_THAT(resumed.refused[0], Contains("step-00000010/stage-1.safetensors"));
  CATCH_CHECK(bit_identical(resumed, straight));
  check_same_steps(straight, resumed, 9);
  fs::remove_all(dir);
}

namespace {

// Regular files of this process may grow to `bytes` at most while it lives (RLIMIT_FSIZE, with
// SIGXFSZ ignored, so a write past it fails with EFBIG), as on a full disk, root or not.
class file_size_limit {
 public:
  explicit file_size_limit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_signal_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit l = old_;
    l.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &l);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_signal_);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;

 private:
  rlimit old_{};
  void (*old_signal_)(int) = SIG_DFL;
};

// A copy in `dir` of the checkpoint `good`, committed with its own manifest (a hand edit
// re-hashed), with `edit` applied to each file's tensors (given the file's index).
void write_edited_checkpoint(const resume_choice& good, const std::string& dir,
                             const std::function<void(size_t, named_tensors&)>& edit) {
  checkpoint_writer copy(dir, good.manifest.step);
  for (size_t i = 0; i < good.manifest.files.size(); ++i) {
    const auto& f = good.manifest.files[i];
    auto tensors = load_safetensors(good.path + "/" + f.name);
    edit(i, tensors);
    const std::string tmp = dir + "-" + f.name;
    save_safetensors(tmp, tensors);
    std::ifstream in(tmp, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    copy.write_file(f.name, bytes.data(), bytes.size());
    fs::remove(tmp);
  }
  copy.commit(good.manifest.meta);
}

}  // namespace

// It stopped the run with an error and nothing more: --save-final, --metrics and --trace of what
// had trained were lost with the checkpoint (a full disk at the last step's save lost the run).
// A checkpoint holding values that are not finite (one a build before the check wrote, from a
// run that had diverged): its first step's NaN loss was blamed on --lr, exit 1 (which launch
// --max-restarts retried). Refused as --init-from refuses such weights, naming the tensor.
CATCH_TEST_CASE("a checkpoint holding values that are not finite is refused by --resume, naming the tensor",
                "[actors][checkpoint]") {
  const std::string dir = fresh_dir("nan-source"), bad = fresh_dir("nan-copy");
  train_options o = tiny_gpt("1f1b", 2, 1, 2);
  o.save_dir = dir;
  run_pipeline(o);
  const resume_choice good = find_resume_checkpoint(dir);
  std::string poisoned;
  write_edited_checkpoint(good, bad, [&](size_t, named_tensors& tensors) {
    if (poisoned.empty())
      for (auto& [name, t] : tensors)
        if (name.find('@') == std::string::npos) {  // a parameter, not a moment
          at::Tensor x = unbox(t).clone();
          x.view(-1)[0] = std::nanf("");
          t = box(x);
          poisoned = name;
          break;
        }
  });
  CATCH_REQUIRE(!poisoned.empty());
  train_options rest = o;
  rest.save_dir.clear();
  rest.steps = 4;
  rest.resume = bad;
  CATCH_CHECK_THROWS_AS(run_pipeline(rest), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(run_pipeline(rest), Contains("'" + poisoned + "' holds 1 of its ") &&
                                                   Contains("values that are not finite (NaN or infinite): its run had "
                                                            "diverged; resume from an earlier checkpoint"));
  fs::remove_all(dir);
  fs::remove_all(bad);
}

// A hand-edited checkpoint, re-hashed into its manifest: one parameter in two of its files
// resumed from the last one read without a word (--init-from refused it), and moments no AdamW
// run leaves made the first update fail as "training diverged (try a lower --lr ...)", exit 1.
CATCH_TEST_CASE("a checkpoint holding a tensor twice or impossible moments is refused by --resume, naming them",
                "[actors][checkpoint]") {
  const std::string dir = fresh_dir("edited-source");
  train_options o = tiny_gpt("1f1b", 2, 1, 2);
  o.save_dir = dir;
  run_pipeline(o);
  const resume_choice good = find_resume_checkpoint(dir);
  CATCH_REQUIRE(good.manifest.files.size() == 2);
  const auto edited = [&](const std::string& name, const std::function<void(size_t, named_tensors&)>& edit) {
    const std::string bad = fresh_dir(name);
    write_edited_checkpoint(good, bad, edit);
    return bad;
  };
  // The second file's first parameter, also in the first file (with other values).
  std::string twice;
  at::Tensor twice_value;
  for (auto& [name, t] : load_safetensors(good.path + "/" + good.manifest.files[1].name))
    if (twice.empty() && name.find('@') == std::string::npos) {
      twice = name;
      twice_value = unbox(t).clone() + 1;
    }
  CATCH_REQUIRE(!twice.empty());
  const std::string doubled = edited("edited-twice", [&](size_t i, named_tensors& t) {
    if (i == 0) t.emplace_back(twice, box(twice_value));
  });
  std::string moment;
  const std::string negative = edited("edited-negative", [&](size_t i, named_tensors& t) {
    for (auto& [name, x] : t)
      if (i == 0 && moment.empty() && name.find(".exp_avg_sq@") != std::string::npos) {
        at::Tensor v = unbox(x).clone();
        v.view(-1)[0] = -1.0;
        x = box(v);
        moment = name;
      }
  });
  CATCH_REQUIRE(!moment.empty());
  train_options rest = o;
  rest.save_dir.clear();
  rest.steps = 4;
  rest.resume = doubled;
  CATCH_CHECK_THROWS_AS(run_pipeline(rest), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(run_pipeline(rest), Contains("'" + twice + "' is in both " + good.manifest.files[0].name +
                                                       " and " + good.manifest.files[1].name +
                                                       ": which one is meant cannot be told"));
  rest.resume = negative;
  CATCH_CHECK_THROWS_AS(run_pipeline(rest), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(run_pipeline(rest), Contains("optimizer tensor '" + moment + "' holds 1 of its ") &&
                                                   Contains(" values below 0: a mean of squares is 0 or more"));
  fs::remove_all(dir);
  fs::remove_all(doubled);
  fs::remove_all(negative);
}

CATCH_TEST_CASE("a checkpoint that cannot be written stops the run with why, keeps what it trained and the checkpoints "
                "before, and leaves nothing",
                "[actors][checkpoint]") {
  for (const char* schedule : {"1f1b", "zbv"}) {  // two parts and four in flight at once
    CATCH_INFO(schedule);
    const std::string dir = fresh_dir("unwritable");
    train_options o = tiny_gpt(schedule, 2, std::string(schedule) == "zbv" ? 2 : 1, 4);
    o.save_dir = dir;
    o.save_every = 2;
    CATCH_REQUIRE(run_pipeline(o).checkpoints.size() == 2);  // steps 2 and 4
    train_options rest = o;
    rest.steps = 6;
    rest.resume = dir;
    rest.save_every = 1;
    {
      file_size_limit small(4096);  // a stage's part is larger
      const train_result failed = run_pipeline(rest);
      CATCH_CHECK_THAT(failed.checkpoint_error, Contains("checkpoint at step 5: writing stage-") &&
                                                    Contains(".safetensors failed: cannot write") &&
                                                    Contains("File too large"));
      CATCH_CHECK(failed.checkpoints.empty());
      CATCH_CHECK(!failed.steps.empty());
      CATCH_CHECK(failed.steps.front().step == 4);        // step 5 ran, and maybe 6 (in flight), no more
      CATCH_CHECK(!failed.parameters.empty());            // what it trained, for --save-final
      CATCH_CHECK(!failed.last_step.events.empty());      // and its timeline, for --trace
    }
    std::set<std::string> left;
    for (const auto& e : fs::directory_iterator(dir)) left.insert(e.path().filename().string());
    // No partial directory (.lock: the lock run_pipeline holds on the folder while it runs).
    CATCH_CHECK(left == std::set<std::string>{".lock", "latest", "step-00000002", "step-00000004"});
    CATCH_CHECK(find_resume_checkpoint(dir).path == dir + "/step-00000004");
    CATCH_CHECK(run_pipeline(rest).checkpoints.size() == 2);  // room again: steps 5 and 6
    fs::remove_all(dir);
  }
}

// What train's SIGINT / SIGTERM handler does, without a signal: a stop asked for as step 6 of 10
// is reported ends the run after the step then in flight (7), with a checkpoint of it,
// and a resume from that checkpoint ends where 10 straight steps do; the reference stops the
// same way, without checkpoints.
CATCH_TEST_CASE("a stop signal ends the run after the step in flight, checkpointed, and the resume ends as a straight run",
                "[actors][checkpoint][signal]") {
  for (const char* schedule : {"1f1b", "zbv"}) {
    CATCH_INFO(schedule);
    const train_options o = tiny_gpt(schedule, 2, std::string(schedule) == "zbv" ? 2 : 1, 10);
    const std::string dir = fresh_dir("stop");
    std::atomic<int> stop{0};
    train_options stopping = o;
    stopping.save_dir = dir;
    stopping.save_every = 4;
    stopping.stop_signal = &stop;
    const train_result stopped = run_pipeline(stopping, [&](const step_metrics& m) {
      if (m.step == 5) stop.store(SIGTERM);  // asked for in step 6's report: the run stops after step 6, as the reference
    });
    CATCH_CHECK(stopped.stopped_by_signal == SIGTERM);
    CATCH_REQUIRE(stopped.steps.size() == 6);
    CATCH_CHECK(stopped.last_step.events.size() > 0);  // the last step's timeline, as after a full run
    std::vector<int> saved;
    for (const auto& c : stopped.checkpoints) saved.push_back(c.step);
    CATCH_CHECK(saved == std::vector<int>{4, 6});
    const train_result straight = run_pipeline(o);
    CATCH_CHECK(straight.stopped_by_signal == 0);
    train_options rest = o;
    rest.resume = dir;  // its newest: step 6
    const train_result resumed = run_pipeline(rest);
    CATCH_CHECK(resumed.resumed_from == dir + "/step-00000006");
    CATCH_CHECK(bit_identical(resumed, straight));
    check_same_steps(straight, resumed, 6);
    fs::remove_all(dir);
  }
  train_options ref = tiny_gpt("1f1b", 2, 1, 10);
  ref.no_pipeline = true;
  std::atomic<int> stop{0};
  ref.stop_signal = &stop;
  const train_result r = run_reference(ref, [&](const step_metrics& m) {
    if (m.step == 2) stop.store(SIGINT);  // the reference checks after each step's report: it stops after step 3
  });
  CATCH_CHECK(r.stopped_by_signal == SIGINT);
  CATCH_CHECK(r.steps.size() == 3);
}
