// A dynamic policy registered from C++ trains: gpipe-waves (examples/waves_policy.hpp) keeps each
// virtual stage's microbatch order, so its final parameters are bit-identical to 1f1b's (and to
// interleaved's with 2 chunks), in one process through run_pipeline, and through the
// custom_policy example binary in one process and in two (launch starts that binary again, so
// every process has registered the policy).
#include <torch/torch.h>

#include "actors/pipeline_runtime.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "examples/waves_policy.hpp"
#include "tests/support/train_results.hpp"

#include <catch2/catch.hpp>

#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"

using namespace actorpipe;
using namespace actorpipe::testing;

namespace {

train_options tiny(const std::string& schedule, int stages, int chunks) { return tiny_gpt(schedule, stages, chunks, 4); }

std::vector<std::string> job(const std::string& schedule, const std::string& save) {
  return {"train",       "--stages", "2",  "--layers",  "4",     "--hidden",           "32",  "--heads", "2",
          "--seq-len",   "16",       "--steps", "3", "--microbatches", "4", "--microbatch-size", "2",
          "--schedule",  schedule,   "--step-timeout", "60", "--save-final", save};
}

}  // namespace

CATCH_TEST_CASE("a registered policy trains bit-identical to 1f1b through run_pipeline", "[actors][runtime][policy]") {
  waves::register_waves_policy();
  train_result one = run_pipeline(tiny("1f1b", 2, 1));
  for (int budget : {0, 1, 3}) {
    CATCH_CAPTURE(budget);
    train_options o = tiny("gpipe-waves", 2, 1);
    o.greedy_budget = budget;
    train_result waves = run_pipeline(o);
    CATCH_CHECK(bit_identical(waves, one));
    CATCH_REQUIRE(waves.steps.size() == one.steps.size());
    for (size_t k = 0; k < one.steps.size(); ++k) CATCH_CHECK(waves.steps[k].loss == one.steps[k].loss);
    // The first rank held its waves' activations (default 2), not 1f1b's 2 - 0.
    CATCH_CAPTURE(waves.last_step.peak_activations);
    CATCH_CHECK(waves.last_step.peak_activations[0] == (budget > 0 ? budget : 2));
  }
  // With 2 chunks per rank (loop placement), against interleaved.
  CATCH_CHECK(bit_identical(run_pipeline(tiny("gpipe-waves", 2, 2)), run_pipeline(tiny("interleaved", 2, 2))));
}

CATCH_TEST_CASE("the custom_policy binary trains its policy in one process and in two", "[multiprocess][slow][policy]") {
  const std::string ref = temp_path(".1f1b.safetensors"), ref_log = temp_path(".1f1b.log");
  CATCH_REQUIRE(wait_process(start_process(ACTORPIPE_BIN, job("1f1b", ref), {}, ref_log), 120) == 0);
  const std::string ref_bytes = read_bytes(ref);
  CATCH_REQUIRE(ref_bytes.size() > 1000);

  const std::string one = temp_path(".waves1.safetensors"), one_log = temp_path(".waves1.log");
  const int one_code = wait_process(start_process(CUSTOM_POLICY_BIN, job("gpipe-waves", one), {}, one_log), 120);
  CATCH_INFO("one process:\n" << process_log(one_log));
  CATCH_REQUIRE(one_code == 0);
  CATCH_CHECK(read_bytes(one) == ref_bytes);

  const std::string two = temp_path(".waves2.safetensors"), two_log = temp_path(".waves2.log");
  std::vector<std::string> args = {"launch", "--nproc-per-node", "2", "--master-port", std::to_string(free_port()), "--"};
  auto train = job("gpipe-waves", two);
  args.insert(args.end(), train.begin(), train.end());
  const int two_code = wait_process(start_process(CUSTOM_POLICY_BIN, args, {{"UCX_TLS", "tcp,self"}}, two_log), 120);
  CATCH_INFO("two processes:\n" << process_log(two_log));
  CATCH_REQUIRE(two_code == 0);
  CATCH_CHECK(read_text(two_log).find("processes: 2") != std::string::npos);
  CATCH_CHECK(read_bytes(two) == ref_bytes);

  // The stock binary does not know the policy, and says what it knows.
  auto unknown = cli({"train", "--schedule", "no-such-policy"});
  CATCH_CHECK(unknown.code == 2);
  CATCH_CHECK(unknown.err.find("unknown schedule 'no-such-policy'") != std::string::npos);
  CATCH_CHECK(unknown.err.find("dynamic policies: ") != std::string::npos);
}
