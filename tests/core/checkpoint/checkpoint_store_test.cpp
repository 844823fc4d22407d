// Checkpoint directories: what is written verifies and is found again; a truncated, altered or
// missing file and a missing manifest are refused naming the file, and the resume falls back;
// pruning keeps the newest; parts given up stop, and what a checkpoint that cannot complete
// wrote goes; a writer SIGKILLed at random moments never leaves a directory
// that resumes wrong.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "core/checkpoint/checkpoint_store.hpp"

using namespace actorpipe;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& tag) {
  const std::string d = fs::temp_directory_path().string() + "/actorpipe-ckpt-" + tag + "-" + std::to_string(::getpid());
  fs::remove_all(d);
  return d;
}

// The bytes of file `which` at `step`: distinct per step, so a mixed checkpoint shows.
std::string content(long long step, int which, std::size_t bytes) {
  std::string s(bytes, '\0');
  std::mt19937_64 rng(static_cast<std::uint64_t>(step * 7 + which));
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::string write_checkpoint(const std::string& dir, long long step, std::size_t bytes = 4096) {
  checkpoint_writer w(dir, step);
  for (int f = 0; f < 2; ++f) {
    const std::string c = content(step, f, bytes);
    w.write_file("part" + std::to_string(f) + ".safetensors", c.data(), c.size());
  }
  return w.commit({{"step_seen", step}});
}

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool holds_step(const std::string& path, long long step, std::size_t bytes) {
  for (int f = 0; f < 2; ++f)
    if (read_file(path + "/part" + std::to_string(f) + ".safetensors") != content(step, f, bytes)) return false;
  return true;
}

}  // namespace

CATCH_TEST_CASE("SHA-256 piece by piece equals the file's and the standard's", "[checkpoint]") {
  sha256_stream abc;
  abc.update("a", 1);
  abc.update("bc", 2);
  CATCH_CHECK(abc.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2 "abc"
  const std::string dir = fresh_dir("sha");
  fs::create_directories(dir);
  const std::string bytes = content(3, 1, 3 << 20);
  std::ofstream(dir + "/f", std::ios::binary) << bytes;
  sha256_stream pieces;
  for (std::size_t at = 0; at < bytes.size(); at += 1000003) pieces.update(bytes.data() + at, std::min<std::size_t>(1000003, bytes.size() - at));
  CATCH_CHECK(pieces.hex() == sha256_of_file(dir + "/f"));
  fs::remove_all(dir);
}

CATCH_TEST_CASE("a written checkpoint verifies and the newest is found", "[checkpoint]") {
  const std::string dir = fresh_dir("basic");
  write_checkpoint(dir, 4);
  const std::string second = write_checkpoint(dir, 8);
  CATCH_CHECK(second == dir + "/step-00000008");
  CATCH_CHECK(read_file(dir + "/latest") == "step-00000008\n");
  const auto m = verify_checkpoint(second);
  CATCH_CHECK(m.step == 8);
  CATCH_CHECK(m.files.size() == 2);
  CATCH_CHECK(m.meta["step_seen"] == 8);
  const auto c = find_resume_checkpoint(dir);
  CATCH_CHECK(c.path == second);
  CATCH_CHECK(c.refused.empty());
  CATCH_CHECK(find_resume_checkpoint(dir + "/step-00000004").manifest.step == 4);
  CATCH_CHECK(sha256_of_file(second + "/manifest.json").size() == 64);
  // A crash between step 8's rename into place and `latest`'s leaves `latest` naming step 4;
  // step 8 is complete, and it is the one taken. A `latest` naming nothing changes nothing.
  for (const char* stale : {"step-00000004\n", "step-00000099\n"}) {
    std::ofstream(dir + "/latest") << stale;
    CATCH_CHECK(find_resume_checkpoint(dir).path == second);
  }
  fs::remove_all(dir);
}

CATCH_TEST_CASE("a damaged checkpoint is refused naming the file, and the resume falls back", "[checkpoint]") {
  struct damage {
    const char* what;
    std::string file;  // named in the refusal
    std::function<void(const std::string& path)> apply;
  };
  const std::vector<damage> cases = {
      {"truncated", "part1.safetensors", [](const std::string& p) { fs::resize_file(p + "/part1.safetensors", 100); }},
      {"a flipped byte", "part0.safetensors",
       [](const std::string& p) {
         std::fstream f(p + "/part0.safetensors", std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(1234);
         char c = 0;
         f.seekg(1234);
         f.get(c);
         f.seekp(1234);
         f.put(static_cast<char>(c ^ 0x10));
       }},
      {"grown", "part1.safetensors", [](const std::string& p) { std::ofstream(p + "/part1.safetensors", std::ios::app) << "x"; }},
      {"a missing manifest", "manifest.json", [](const std::string& p) { fs::remove(p + "/manifest.json"); }},
      {"a missing file", "part1.safetensors", [](const std::string& p) { fs::remove(p + "/part1.safetensors"); }},
      // The newest is chosen by its name: a manifest of another step resumed as that step.
      {"a manifest of another step", "manifest.json",
       [](const std::string& p) {
         nlohmann::json j = nlohmann::json::parse(std::ifstream(p + "/manifest.json"));
         j["step"] = 4;
         std::ofstream(p + "/manifest.json") << j.dump();
       }},
      // A negative step reached the learning rate's schedule (an actor's unhandled exception); a
      // fraction was read as its whole part; a meta nested past a bound overflowed the stack
      // when copied; a meta of another type threw a raw type_error later.
      {"a negative step", "manifest.json",
       [](const std::string& p) {
         nlohmann::json j = nlohmann::json::parse(std::ifstream(p + "/manifest.json"));
         j["step"] = -3;
         std::ofstream(p + "/manifest.json") << j.dump();
       }},
      {"a fractional format", "manifest.json",
       [](const std::string& p) {
         nlohmann::json j = nlohmann::json::parse(std::ifstream(p + "/manifest.json"));
         j["format"] = 1.9;
         std::ofstream(p + "/manifest.json") << j.dump();
       }},
      {"a meta nested past the bound", "manifest.json",
       [](const std::string& p) {
         std::ofstream(p + "/manifest.json") << R"({"format": 1, "step": 6, "files": {}, "meta": {"lr": )" +
                                                    std::string(200000, '[') + std::string(200000, ']') + "}}";
       }},
      {"a meta that is no object", "manifest.json",
       [](const std::string& p) {
         nlohmann::json j = nlohmann::json::parse(std::ifstream(p + "/manifest.json"));
         j["meta"] = "x";
         std::ofstream(p + "/manifest.json") << j.dump();
       }},
  };
  for (const auto& d : cases) {
    CATCH_INFO(d.what);
    const std::string dir = fresh_dir("damage");
    write_checkpoint(dir, 3);
    const std::string newest = write_checkpoint(dir, 6);
    d.apply(newest);
    CATCH_CHECK_THROWS_WITH(verify_checkpoint(newest), Contains(newest + "/" + d.file));
    // Which way the size is off (a grown file was called "truncated?").
    if (std::string(d.what) == "truncated") CATCH_CHECK_THROWS_WITH(verify_checkpoint(newest), Contains(" (truncated?)"));
    if (std::string(d.what) == "grown") CATCH_CHECK_THROWS_WITH(verify_checkpoint(newest), Contains(" (written to since?)"));
    const auto c = find_resume_checkpoint(dir);
    CATCH_CHECK(c.path == dir + "/step-00000003");
    CATCH_REQUIRE(c.refused.size() == 1);
    CATCH_CHECK_THAT(c.refused[0], Contains(d.file));
    CATCH_CHECK_THROWS_WITH(find_resume_checkpoint(newest), Contains(d.file));  // named explicitly: no fallback
    fs::remove_all(dir);
  }
  const std::string empty = fresh_dir("empty");
  fs::create_directories(empty);
  CATCH_CHECK_THROWS_WITH(find_resume_checkpoint(empty), Contains("no valid checkpoint (none written)"));
  fs::remove_all(empty);
  const std::string renamed = fresh_dir("renamed");
  fs::rename(write_checkpoint(renamed, 6), renamed + "/step-00000009");
  CATCH_CHECK_THROWS_WITH(verify_checkpoint(renamed + "/step-00000009"),
                          renamed + "/step-00000009/manifest.json: step 6, where its folder's name says step 9");
  // Every refusal on the one line of the error.
  CATCH_CHECK_THROWS_WITH(find_resume_checkpoint(renamed),
                          "--resume '" + renamed + "': no valid checkpoint: " + renamed +
                              "/step-00000009/manifest.json: step 6, where its folder's name says step 9");
  fs::remove_all(renamed);
  // What each of those says.
  const std::string said = fresh_dir("said");
  const std::string step = write_checkpoint(said, 6);
  const auto rewrite = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(step + "/manifest.json"));
    change(j);
    std::ofstream(step + "/manifest.json") << j.dump();
  };
  rewrite([](nlohmann::json& j) { j["step"] = -3; });
  CATCH_CHECK_THROWS_WITH(verify_checkpoint(step), step + "/manifest.json: step -3 is not a whole number >= 0");
  rewrite([](nlohmann::json& j) { j["step"] = 2.7; });
  CATCH_CHECK_THROWS_WITH(verify_checkpoint(step), step + "/manifest.json: step 2.7 is not a whole number >= 0");
  rewrite([](nlohmann::json& j) { j["step"] = 6, j["meta"] = 5; });
  CATCH_CHECK_THROWS_WITH(verify_checkpoint(step), step + "/manifest.json: meta is not a JSON object");
  std::ofstream(step + "/manifest.json") << "{\"format\": 1, \"step\": 6, \"files\": {}, \"meta\": {\"lr\": " +
                                               std::string(101, '[') + std::string(101, ']') + "}}";
  CATCH_CHECK_THROWS_WITH(verify_checkpoint(step), step + "/manifest.json: nests deeper than 100 levels");
  fs::remove_all(said);
}

CATCH_TEST_CASE("pruning keeps the newest complete checkpoints and drops crashed partial ones", "[checkpoint]") {
  const std::string dir = fresh_dir("prune");
  for (long long s : {2, 4, 6, 8}) write_checkpoint(dir, s);
  checkpoint_writer crashed(dir, 5);  // never committed: a crash
  checkpoint_writer in_flight(dir, 10);  // newer than every complete one: maybe still being written
  prune_checkpoints(dir, 2);
  CATCH_CHECK(!fs::exists(dir + "/step-00000002"));
  CATCH_CHECK(!fs::exists(dir + "/step-00000004"));
  CATCH_CHECK(fs::exists(dir + "/step-00000006"));
  CATCH_CHECK(fs::exists(dir + "/step-00000008"));
  CATCH_CHECK(!fs::exists(crashed.partial_path()));
  CATCH_CHECK(fs::exists(in_flight.partial_path()));
  CATCH_CHECK(find_resume_checkpoint(dir).manifest.step == 8);
  fs::remove_all(dir);
}

namespace {
// A running job saving into `dir` with --keep-last 1: a checkpoint of `bytes` after another,
// from step 2 on, until it goes.
class pruning_writer {
 public:
  pruning_writer(std::string dir, std::size_t bytes)
      : job_([this, dir = std::move(dir), bytes] {
          for (long long step = 2; !done_.load() && step < 100000; ++step) {
            write_checkpoint(dir, step, bytes);
            prune_checkpoints(dir, 1);
          }
        }) {}
  ~pruning_writer() {
    done_.store(true);
    job_.join();
  }
  pruning_writer(const pruning_writer&) = delete;
  pruning_writer& operator=(const pruning_writer&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread job_;
};
}  // namespace

// A reader of a folder a running job saves into with --keep-last 1: the checkpoint it was
// reading could be pruned under it, and it said "no valid checkpoint" though a newer one was
// complete (2 of 25 --init-from of such a folder). The search goes round again instead.
CATCH_TEST_CASE("finding the newest checkpoint while a writer commits and prunes never comes back empty", "[checkpoint]") {
  const std::string dir = fresh_dir("pruned-under");
  write_checkpoint(dir, 1, 4 << 20);
  int found = 0, refused = 0;
  std::string missed;
  {
    const pruning_writer job(dir, 4 << 20);
    for (int i = 0; i < 150 && missed.empty(); ++i) {
      try {
        const resume_choice c = find_resume_checkpoint(dir);
        refused += !c.refused.empty();
        ++found;
      } catch (const std::exception& e) {
        missed = e.what();
      }
    }
  }
  CATCH_INFO("no checkpoint found while the folder always held one: " << missed);
  CATCH_CHECK(found == 150);
  CATCH_CHECK(refused == 0);
  fs::remove_all(dir);
}

// The same reader's load, after the search: the checkpoint it chose could be pruned between its
// verification and the load ("cannot open safetensors file ...", 1 of 6 --resume of such a
// folder). The search goes round again where the chosen one is gone; other failures are the
// reader's own.
CATCH_TEST_CASE("loading the newest checkpoint while a writer commits and prunes finds a newer one", "[checkpoint]") {
  const std::string dir = fresh_dir("pruned-at-load");
  write_checkpoint(dir, 1, 1 << 20);
  int loaded = 0, rounds = 0, tries = 0;
  std::string missed;
  std::optional<pruning_writer> job(std::in_place, dir, 1 << 20);
  // Until some loads have lost their checkpoint and gone round again (or 1000 loads).
  for (; (tries < 100 || rounds - tries < 3) && tries < 1000 && missed.empty(); ++tries) {
    try {
      read_resume_checkpoint(dir, [&](const resume_choice& c) {
        ++rounds;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a load's time, for the prune to come
        for (const auto& f : c.manifest.files) {
          std::ifstream in(c.path + "/" + f.name, std::ios::binary);
          if (!in) throw std::runtime_error("cannot open " + c.path + "/" + f.name);
          // At once, as a load reads: read byte by byte under AddressSanitizer, 1 load in 30-80
          // lost its checkpoint 21 times in a row to the writer's prunes.
          std::string bytes(f.bytes + 1, '\0');
          in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
          if (static_cast<std::size_t>(in.gcount()) != f.bytes) throw std::runtime_error("short read of " + f.name);
        }
      });
      ++loaded;
    } catch (const std::exception& e) {
      missed = e.what();
    }
  }
  job.reset();
  CATCH_INFO("a load failed while the folder always held a checkpoint: " << missed);
  CATCH_CHECK(loaded == tries);
  CATCH_CHECK(rounds > tries);  // some loads lost their checkpoint and went round again
  // A failure of the reader's own, on a checkpoint that stays, is the reader's: no second round.
  rounds = 0;
  CATCH_CHECK_THROWS_WITH(read_resume_checkpoint(dir,
                                                 [&](const resume_choice&) {
                                                   ++rounds;
                                                   throw std::runtime_error("the model does not fit");
                                                 }),
                          "the model does not fit");
  CATCH_CHECK(rounds == 1);
  // A writer that prunes every checkpoint before it is read: the search gives up after 21
  // rounds, saying why (it passed on the last load's "cannot open ...", read as a damaged file).
  rounds = 0;
  long long next = 1000000;
  CATCH_CHECK_THROWS_WITH(read_resume_checkpoint(dir,
                                                 [&](const resume_choice& c) {
                                                   ++rounds;
                                                   write_checkpoint(dir, next++, 1024);
                                                   prune_checkpoints(dir, 1);
                                                   throw std::runtime_error("cannot open " + c.path + "/part1");
                                                 }),
                          "--resume '" + dir + "': the checkpoint chosen was pruned while it was read, 21 times in a "
                          "row (a run saving into this folder with --keep-last, faster than its checkpoints can be "
                          "read?): copy its newest checkpoint elsewhere and give that, or stop that run");
  CATCH_CHECK(rounds == 21);
  fs::remove_all(dir);
}

// Pruning counted and removed every step-N folder: one without a manifest (someone's folder)
// went, a user's file inside a checkpoint went with it, and a damaged newer copy took a
// --keep-last slot, so fewer good checkpoints stayed than asked for.
CATCH_TEST_CASE("pruning counts and removes checkpoints only, and leaves what a manifest does not list", "[checkpoint]") {
  const std::string dir = fresh_dir("prune-own");
  for (long long s : {2, 4, 6, 8}) write_checkpoint(dir, s);
  fs::create_directories(dir + "/step-00000001");
  std::ofstream(dir + "/step-00000001/notes.txt") << "precious";
  std::ofstream(dir + "/step-00000004/eval-notes.txt") << "mine";
  fs::copy(dir + "/step-00000006", dir + "/step-00000010");  // its manifest says step 6: damaged
  prune_checkpoints(dir, 2);
  CATCH_CHECK(fs::exists(dir + "/step-00000001/notes.txt"));  // no checkpoint: neither counted nor removed
  CATCH_CHECK(!fs::exists(dir + "/step-00000002"));
  CATCH_CHECK(read_file(dir + "/step-00000004/eval-notes.txt") == "mine");  // left whole, with a warning
  CATCH_CHECK(fs::exists(dir + "/step-00000004/manifest.json"));
  CATCH_CHECK(holds_step(dir + "/step-00000006", 6, 4096));  // the damaged step 10 took no slot
  CATCH_CHECK(holds_step(dir + "/step-00000008", 8, 4096));
  CATCH_CHECK(fs::exists(dir + "/step-00000010"));
  fs::remove_all(dir);
}

// A save folder holding only step-N folders without a manifest was "a checkpoint of another
// run: continue that run with --resume", which then found no valid checkpoint.
CATCH_TEST_CASE("a save folder with step folders but no checkpoint says so, not 'resume it'", "[checkpoint]") {
  const std::string dir = fresh_dir("no-manifest");
  fs::create_directories(dir + "/step-00000001");
  CATCH_CHECK_THROWS_WITH(check_save_dir_is_ours(dir, "", 0),
                          Contains("holds step-00000001, named as this run names its checkpoints but no checkpoint") &&
                              !Contains("--resume"));
  write_checkpoint(dir, 3);
  CATCH_CHECK_THROWS_WITH(check_save_dir_is_ours(dir, "", 0),
                          Contains("holds 1 checkpoint of another run (step-00000003)"));
  fs::remove_all(dir);
}

// A run killed while it saved left its partial directory; pruning spares those of steps past
// the newest complete one, and a resumed run saves that step again, so they piled up until a
// disk with room for --keep-last failed every save. The run that takes the lock removes them.
CATCH_TEST_CASE("taking a folder's lock removes the unfinished writes of a run that died while it saved", "[checkpoint]") {
  const std::string dir = fresh_dir("leftovers");
  write_checkpoint(dir, 4);
  const std::string dead_step = checkpoint_writer(dir, 5).partial_path();
  const std::string dead_latest = dir + "/.latest-0123456789ab";
  std::ofstream(dead_latest) << "step-00000005\n";
  std::ofstream(dead_step + "/stage-0.safetensors") << std::string(1 << 20, 'x');
  {
    const save_dir_lock held(dir);
    CATCH_CHECK(!fs::exists(dead_step));
    CATCH_CHECK(!fs::exists(dead_latest));
    CATCH_CHECK(find_resume_checkpoint(dir).manifest.step == 4);  // the complete ones stay
    CATCH_CHECK(fs::exists(dir + "/latest"));
  }
  fs::remove_all(dir);
}

// A folder under a checkpoint's name made while the run went on (a user's, with their files)
// was removed, contents and all, as if it were a retake of the step. A retake still replaces
// the checkpoint of its step.
CATCH_TEST_CASE("a commit replaces a checkpoint of its step, and leaves a folder of its name that is not one", "[checkpoint]") {
  const std::string dir = fresh_dir("foreign-step");
  write_checkpoint(dir, 5);
  CATCH_CHECK(write_checkpoint(dir, 5) == dir + "/step-00000005");  // a retake
  CATCH_CHECK(find_resume_checkpoint(dir).manifest.step == 5);
  fs::create_directories(dir + "/step-00000007/x");
  { std::ofstream(dir + "/step-00000007/x/data.txt") << "precious"; }
  CATCH_CHECK_THROWS_WITH(write_checkpoint(dir, 7),
                          "'" + dir + "/step-00000007' exists and is not only a checkpoint of step 7 (a folder made while "
                          "the run went on?): it is left as it is, and this checkpoint is not written");
  CATCH_CHECK(fs::exists(dir + "/step-00000007/x/data.txt"));
  // A checkpoint of the step with a file of someone's in it is left too.
  { std::ofstream(dir + "/step-00000005/notes.txt") << "mine"; }
  CATCH_CHECK_THROWS_WITH(write_checkpoint(dir, 5), Catch::Contains("is not only a checkpoint of step 5"));
  CATCH_CHECK(fs::exists(dir + "/step-00000005/notes.txt"));
  fs::remove_all(dir);
}

CATCH_TEST_CASE("checkpoint parts given up stop, and what a checkpoint that cannot complete wrote goes", "[checkpoint]") {
  const std::string dir = fresh_dir("parts");
  checkpoint_writer kept(dir, 2), failed(dir, 4), stopped(dir, 6);
  checkpoint_writes parts;
  parts.begin(kept.partial_path());
  parts.end(kept.partial_path(), true);  // written: its checkpoint may still be committed
  parts.begin(failed.partial_path());
  parts.end(failed.partial_path(), false);  // a part failed: its checkpoint cannot complete
  parts.begin(stopped.partial_path());  // still being written when the run fails
  CATCH_CHECK_NOTHROW(parts.check());
  parts.give_up();
  CATCH_CHECK_THROWS_WITH(parts.check(), "the run stopped before this checkpoint was complete");
  std::thread late([&] {  // the part in flight sees the run give up at its next piece
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    parts.end(stopped.partial_path(), false);
  });
  CATCH_CHECK(parts.settle(std::chrono::seconds(60)));  // waits for it
  late.join();
  CATCH_CHECK(!fs::exists(failed.partial_path()));
  CATCH_CHECK(!fs::exists(stopped.partial_path()));
  // The run is over: a written part whose checkpoint was not committed (renamed away) goes too
  // (a member's part, written after process 0 had removed the folder, left it behind).
  CATCH_CHECK(!fs::exists(kept.partial_path()));
  // Not given up (a run that finished), a written part's folder is its commit's to rename.
  checkpoint_writes finished;
  checkpoint_writer committed(dir, 8);
  finished.begin(committed.partial_path());
  finished.end(committed.partial_path(), true);
  CATCH_CHECK(finished.settle(std::chrono::seconds(1)));
  CATCH_CHECK(fs::exists(committed.partial_path()));
  finished.discard(committed.partial_path());  // its commit failed
  finished.begin(committed.partial_path());  // a part that never ends: settle gives up waiting at its limit
  CATCH_CHECK(!finished.settle(std::chrono::milliseconds(20)));
  CATCH_CHECK(!fs::exists(committed.partial_path()));
  fs::remove_all(dir);
}

CATCH_TEST_CASE("resuming from a path that is missing or a file names it and says which", "[checkpoint]") {
  const std::string dir = fresh_dir("resume-path");
  CATCH_CHECK_THROWS_WITH(find_resume_checkpoint(dir + "/nowhere"), "--resume '" + dir + "/nowhere': does not exist");
  fs::create_directories(dir);
  { std::ofstream(dir + "/file") << "x"; }
  CATCH_CHECK_THROWS_WITH(find_resume_checkpoint(dir + "/file"), "--resume '" + dir + "/file': not a directory");
  fs::remove_all(dir);
}

CATCH_TEST_CASE("a writer SIGKILLed at random moments never leaves a checkpoint that resumes wrong",
                "[checkpoint][crash]") {
  const std::string dir = fresh_dir("crash");
  const std::size_t bytes = 1 << 20;
  std::mt19937 rng(20261201);
  int resumed = 0;
  long long last_seen = -1;
  for (int trial = 0; trial < 24; ++trial) {
    const long long first_step = 1000LL * trial + 1;  // this trial's writer's
    const pid_t pid = ::fork();
    CATCH_REQUIRE(pid >= 0);
    if (pid == 0) {  // the writer: checkpoints one after another, pruning as training would
      try {
        for (long long step = first_step;; ++step) {
          write_checkpoint(dir, step, bytes);
          prune_checkpoints(dir, 2);
        }
      } catch (...) {
      }
      ::_exit(3);
    }
    // The first trials are killed at any moment, perhaps before anything is written; the others
    // only after this writer completed a checkpoint of its own, so that a slow, loaded machine
    // still kills most writers in the middle of later writes and prunes.
    const bool wait_for_own = trial >= 4;
    if (wait_for_own) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (;;) {
        try {
          if (find_resume_checkpoint(dir).manifest.step >= first_step) break;
        } catch (const std::exception&) {  // nothing complete yet, or a prune racing the scan
        }
        if (std::chrono::steady_clock::now() > give_up) {  // end the writer before failing
          ::kill(pid, SIGKILL);
          ::waitpid(pid, nullptr, 0);
          CATCH_FAIL("writer " << trial << " completed no checkpoint in 60 s");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 60000)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CATCH_CHECK(WIFSIGNALED(status));
    try {
      const auto c = find_resume_checkpoint(dir);
      CATCH_CHECK(holds_step(c.path, c.manifest.step, bytes));  // complete and of one step
      CATCH_CHECK(c.manifest.step >= last_seen);                // never older than one resumed before
      if (wait_for_own) CATCH_CHECK(c.manifest.step >= first_step);  // this writer's, not an older one
      last_seen = c.manifest.step;
      ++resumed;
    } catch (const checkpoint_error& e) {
      CATCH_CHECK(!wait_for_own);
      CATCH_CHECK(last_seen < 0);  // only before the first checkpoint ever completed
      // Killed before it made the directory (a short first sleep on a loaded machine), or after.
      CATCH_CHECK_THAT(std::string(e.what()),
                       Contains(fs::exists(dir) ? "no valid checkpoint" : "'" + dir + "': does not exist"));
    }
  }
  CATCH_CHECK(resumed >= 20);  // every trial that waited for its writer's checkpoint
  fs::remove_all(dir);
}

// "dir/step-00000004/" (a shell's completion) is that checkpoint as "dir/step-00000004" is: with
// its manifest gone, it said "no valid checkpoint (none written)" instead of naming the manifest.
CATCH_TEST_CASE("a checkpoint named with a trailing slash is that checkpoint", "[checkpoint]") {
  const std::string dir = fresh_dir("slash");
  const std::string step = write_checkpoint(dir, 4);
  CATCH_CHECK(find_resume_checkpoint(step + "/").manifest.step == 4);
  fs::remove(step + "/manifest.json");
  CATCH_CHECK_THROWS_WITH(find_resume_checkpoint(step + "/"), Contains("manifest.json: missing (an incomplete checkpoint)"));
  fs::remove_all(dir);
}
