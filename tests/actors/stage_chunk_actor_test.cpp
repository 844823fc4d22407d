// The stage and chunk actors on their own: each spawned alone in an actor system, its peers
// played by scoped actors (the test scripts what arrives and when), the chunk's compute a
// recording fake. What they send, in what order, and what they refuse to do early.
#include <torch/torch.h>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "transport/local/local_transport.hpp"

#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>

#include <catch2/catch.hpp>

using namespace actorpipe;
using Catch::Contains;

namespace {

constexpr auto patience = std::chrono::seconds(10);

// Receives messages until one of type T arrives (skipping the stage's "waiting" reports,
// which come whenever it idles), or fails the test after `patience`.
template <class T>
T expect(caf::scoped_actor& self) {
  std::optional<T> got;
  while (!got) {
    bool timed_out = false;
    self->receive([&](T& m) { got = std::move(m); }, [&](msg::waiting&) {},
                  caf::after(patience) >> [&] { timed_out = true; });
    if (timed_out) throw std::runtime_error("no message of the expected type arrived");
  }
  return *got;
}

// True if no message of type T arrives for a moment ("waiting" reports are skipped).
template <class T>
bool quiet(caf::scoped_actor& self) {
  bool silent = true, done = false;
  while (!done)
    self->receive([&](msg::waiting&) {}, [&](T&) { silent = false, done = true; },
                  caf::after(std::chrono::milliseconds(150)) >> [&] { done = true; });
  return silent;
}

// A chunk that records what it was asked to do: F doubles its input, B hands back ones.
class recording_chunk final : public chunk_compute {
 public:
  recording_chunk(bool last, int throw_on_forward = -1) : last_(last), throw_on_forward_(throw_on_forward) {}
  forward_result forward(int m, const tensor_box& input, const tensor_box& targets, double) override {
    log("F" + std::to_string(m));
    if (m == throw_on_forward_) throw std::runtime_error("boom");
    if (last_ && !targets.defined()) throw std::runtime_error("no targets");
    ++live_;
    forward_result r;
    if (last_) r.loss = 0.5 + m;
    else r.output = box(unbox(input) * 2);
    return r;
  }
  tensor_box backward(int m, const tensor_box&, bool) override {
    log("B" + std::to_string(m));
    --live_;
    return tensor_box();
  }
  void weight_grad(int m) override { log("W" + std::to_string(m)); }
  int live_stashes() const override { return live_; }
  int pending_weight_grads() const override { return 0; }
  std::vector<std::pair<std::string, tensor_box>> named_parameters() const override { return {}; }
  void zero_grad() override {}
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

 private:
  void log(std::string s) {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.push_back(std::move(s));
  }
  bool last_;
  int throw_on_forward_;
  int live_ = 0;
  std::mutex mutex_;
  std::vector<std::string> calls_;
};

// Two ranks, one chunk each, 1f1b over two microbatches (or `schedule` over `microbatches`);
// every actor handle starts as `nobody`.
std::shared_ptr<run_context> two_rank_context(caf::actor nobody, const std::string& schedule = "1f1b",
                                              int microbatches = 2) {
  auto ctx = std::make_shared<run_context>();
  ctx->options.stages = 2;
  ctx->options.microbatches = microbatches;
  ctx->static_plan = std::make_shared<const plan>(make_schedule(schedule, {2, microbatches, 1}));
  ctx->place = ctx->static_plan->place;
  ctx->ranks = ctx->virtual_stages = 2;
  ctx->grid = make_rank_grid(2, 1);
  ctx->microbatches = microbatches;
  ctx->process_of_rank = {0, 0};
  ctx->compute = ctx->chunk_actors = ctx->stage = ctx->optimizer_shards = {nobody, nobody};
  ctx->supervisor = ctx->feeder = nobody;
  return ctx;
}

caf::actor_system_config& config() {
  static caf::actor_system_config cfg = [] {
    caf::actor_system_config c;
    add_message_types(c);
    return c;
  }();
  return cfg;
}

}  // namespace

CATCH_TEST_CASE("the stage actor runs its plan only as inputs arrive, two actions in flight, then flushes",
                "[actors][stage]") {
  caf::actor_system sys{config()};
  caf::scoped_actor chunk{sys}, sup{sys}, nobody{sys};
  auto ctx = two_rank_context(caf::actor_cast<caf::actor>(nobody));
  ctx->chunk_actors[0] = caf::actor_cast<caf::actor>(chunk);
  ctx->supervisor = caf::actor_cast<caf::actor>(sup);
  auto stage = sys.spawn(stage_actor, std::shared_ptr<const run_context>(ctx), 0);
  // Rank 0 of 1f1b, P = 2, M = 2: F0.0 F0.1 B0.0 B0.1, numbered in the order handed over.
  std::int64_t handed = 0;
  auto run_of = [&] {
    const msg::run r = expect<msg::run>(chunk);
    CATCH_CHECK(r.order == handed++);
    return to_string(r.act);
  };
  auto done = [&](const std::string& text, int live) {
    chunk->send(stage, msg::action_done{0, parse_action(text), 0.0, 0.001, live, 0, -1, {}});
  };

  chunk->send(stage, msg::input_ready{0, false, 0, 1});  // F0.1's input first: F0.0 is next
  CATCH_CHECK(quiet<msg::run>(chunk));
  chunk->send(stage, msg::input_ready{0, false, 0, 0});
  CATCH_CHECK(run_of() == "F0.0");
  CATCH_CHECK(run_of() == "F0.1");  // a second action queued behind the first
  done("F0.0", 1);
  done("F0.1", 2);
  CATCH_CHECK(quiet<msg::run>(chunk));  // B0.0 waits for its gradient
  chunk->send(stage, msg::input_ready{0, true, 0, 0});
  CATCH_CHECK(run_of() == "B0.0");
  done("B0.0", 1);
  chunk->send(stage, msg::input_ready{0, true, 0, 1});
  CATCH_CHECK(run_of() == "B0.1");
  done("B0.1", 0);
  const auto f = expect<msg::flush>(sup);
  CATCH_CHECK(f.step == 0);
  CATCH_CHECK(f.rank == 0);
  CATCH_CHECK(f.events.size() == 4);
  CATCH_CHECK(f.peak_activations == 2);
  caf::anon_send_exit(stage, caf::exit_reason::user_shutdown);
}

// Two chunks' actors pass the actions a stage handed them on in either order; the compute
// thread runs them in the stage's (msg::run::order), anything else as it comes.
CATCH_TEST_CASE("the compute actor runs a stage's actions in the order handed over, other jobs as they come",
                "[actors][compute]") {
  caf::actor_system sys{config()};
  caf::scoped_actor sender{sys};
  auto compute = sys.spawn<caf::detached>(compute_actor);
  std::vector<std::int64_t> ran;  // touched on the compute thread only, read after `finished`
  auto job = [&](std::int64_t order) { return msg::compute_job{[&ran, order] { ran.push_back(order); }, order}; };
  for (std::int64_t order : {2, -1, 0, 1, 5, 4, -1, 3}) sender->send(compute, job(order));
  std::promise<void> finished;
  sender->send(compute, msg::compute_job{[&] { finished.set_value(); }});
  CATCH_REQUIRE(finished.get_future().wait_for(patience) == std::future_status::ready);
  CATCH_CHECK(ran == std::vector<std::int64_t>{-1, 0, 1, 2, -1, 3, 4, 5});
  caf::anon_send_exit(compute, caf::exit_reason::user_shutdown);
}

// zb-h1, rank 0 of 2, M = 4: F0.0 F0.1 I0.0 F0.2 I0.1 W0.0 ... Once F0.2 is done the rank waits
// for I0.1's gradient with W0.0 ready: whether it fills the wait with W0.0 depends on where the
// action producing that gradient (I1.1, rank 1, in this process) is.
CATCH_TEST_CASE("a rank fills a wait with a W only while the input it waits for is not on its way",
                "[actors][stage]") {
  enum class producer { not_started, output_sent, running_no_w_measured };
  for (producer state : {producer::not_started, producer::output_sent, producer::running_no_w_measured}) {
    CATCH_INFO("producer state " << static_cast<int>(state));
    caf::actor_system sys{config()};
    caf::scoped_actor chunk{sys}, sup{sys}, nobody{sys};
    auto ctx = two_rank_context(caf::actor_cast<caf::actor>(nobody), "zb-h1", 4);
    ctx->chunk_actors[0] = caf::actor_cast<caf::actor>(chunk);
    ctx->supervisor = caf::actor_cast<caf::actor>(sup);
    ctx->track_producers();
    const int slot = ctx->action_slot(1, 1, true);
    if (state == producer::output_sent) ctx->started_step[slot].store(1);  // 2 x step 0, + 1
    if (state == producer::running_no_w_measured) {
      ctx->started_step[slot].store(0);
      ctx->started_at[slot].store(ctx->now());
      ctx->last_took[ctx->took_slot(1, true)].store(10.0);  // due in 10 s
    }
    auto stage = sys.spawn(stage_actor, std::shared_ptr<const run_context>(ctx), 0);
    auto run = [&] { return expect<msg::run>(chunk); };
    auto done = [&](const std::string& text) {
      chunk->send(stage, msg::action_done{0, parse_action(text), 0.0, 0.001, 0, 0, -1, {}});
    };
    chunk->send(stage, msg::input_ready{0, false, 0, 0});
    chunk->send(stage, msg::input_ready{0, false, 0, 1});
    CATCH_CHECK(to_string(run().act) == "F0.0");
    CATCH_CHECK(to_string(run().act) == "F0.1");
    done("F0.0");
    done("F0.1");
    chunk->send(stage, msg::input_ready{0, true, 0, 0});   // I0.0's gradient
    chunk->send(stage, msg::input_ready{0, false, 0, 2});  // and F0.2's input: no wait between them
    CATCH_CHECK(to_string(run().act) == "I0.0");
    CATCH_CHECK(to_string(run().act) == "F0.2");
    done("I0.0");
    done("F0.2");
    if (state == producer::not_started) {
      const msg::run w = run();
      CATCH_CHECK(to_string(w.act) == "W0.0");
      CATCH_CHECK(w.fill);
    } else {
      CATCH_CHECK(quiet<msg::run>(chunk));
      chunk->send(stage, msg::input_ready{0, true, 0, 1});
      const msg::run i = run();
      CATCH_CHECK(to_string(i.act) == "I0.1");
      CATCH_CHECK_FALSE(i.fill);
    }
    caf::anon_send_exit(stage, caf::exit_reason::user_shutdown);
  }
}

CATCH_TEST_CASE("the chunk actor reports ready inputs, runs on the compute thread, sends on, reports failures",
                "[actors][chunk]") {
  caf::actor_system sys{config()};
  caf::scoped_actor stage{sys}, sup{sys}, nobody{sys};
  auto ctx = two_rank_context(caf::actor_cast<caf::actor>(nobody));
  auto first = std::make_shared<recording_chunk>(false, /*throw_on_forward=*/1);
  auto last = std::make_shared<recording_chunk>(true);
  ctx->runners = {first, last};
  ctx->stage = {caf::actor_cast<caf::actor>(stage), caf::actor_cast<caf::actor>(stage)};
  ctx->supervisor = caf::actor_cast<caf::actor>(sup);
  ctx->compute = {sys.spawn<caf::detached>(compute_actor), sys.spawn<caf::detached>(compute_actor)};
  std::mutex sent_mutex;
  std::vector<tensor_meta> sent;
  ctx->data = transport::make_local_transport();
  ctx->data->set_handlers(
      [&](const tensor_meta& m, tensor_box) {
        std::lock_guard<std::mutex> lock(sent_mutex);
        sent.push_back(m);
      },
      [](int, const std::string&) {});
  auto c0 = sys.spawn(chunk_actor, std::shared_ptr<const run_context>(ctx), 0);
  auto c1 = sys.spawn(chunk_actor, std::shared_ptr<const run_context>(ctx), 1);
  ctx->chunk_actors = {c0, c1};

  // First stage: an activation makes F ready; F runs, its output goes to stage 1.
  stage->send(c0, msg::activation{0, 0, 0, box(at::ones({2, 3}))});
  auto r = expect<msg::input_ready>(stage);
  CATCH_CHECK((r.step == 0 && !r.is_gradient && r.virtual_stage == 0 && r.microbatch == 0));
  stage->send(c0, msg::run{0, parse_action("F0.0")});
  auto d = expect<msg::action_done>(stage);
  CATCH_CHECK(to_string(d.act) == "F0.0");
  CATCH_CHECK(d.live_stashes == 1);
  {
    std::lock_guard<std::mutex> lock(sent_mutex);
    CATCH_REQUIRE(sent.size() == 1);
    CATCH_CHECK(sent[0].kind == tensor_kind::activation);
    CATCH_CHECK(sent[0].virtual_stage == 1);
    CATCH_CHECK(sent[0].microbatch == 0);
  }
  // A gradient makes B ready.
  stage->send(c0, msg::gradient{0, 0, 0, box(at::ones({2, 3}))});
  r = expect<msg::input_ready>(stage);
  CATCH_CHECK((r.is_gradient && r.microbatch == 0));
  stage->send(c0, msg::run{0, parse_action("B0.0")});
  CATCH_CHECK(to_string(expect<msg::action_done>(stage).act) == "B0.0");
  CATCH_CHECK(first->calls() == std::vector<std::string>{"F0", "B0"});

  // Last stage: F is ready only once both the activation and the targets are here; its loss
  // goes to the supervisor.
  stage->send(c1, msg::activation{0, 1, 0, box(at::ones({2, 3}))});
  CATCH_CHECK(quiet<msg::input_ready>(stage));
  stage->send(c1, msg::targets{0, 0, box(at::zeros({2}))});
  r = expect<msg::input_ready>(stage);
  CATCH_CHECK((r.virtual_stage == 1 && !r.is_gradient));
  stage->send(c1, msg::run{0, parse_action("F1.0")});
  const auto loss = expect<msg::loss_report>(sup);
  CATCH_CHECK((loss.step == 0 && loss.microbatch == 0 && loss.loss == 0.5));

  // An action that throws stops the job with the rank, step, action and reason.
  stage->send(c0, msg::activation{0, 0, 1, box(at::ones({2, 3}))});
  expect<msg::input_ready>(stage);
  stage->send(c0, msg::run{0, parse_action("F0.1")});
  const auto failure = expect<msg::failure>(sup);
  CATCH_CHECK_THAT(failure.what, Contains("rank 0, step 1: F0.1 failed: boom"));

  for (auto& a : {c0, c1, ctx->compute[0], ctx->compute[1]}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  ctx->compute.clear(), ctx->chunk_actors.clear();
}
