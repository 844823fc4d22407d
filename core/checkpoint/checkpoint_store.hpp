// A directory of checkpoints that survives a crash at any moment. Each checkpoint is a
// subdirectory `step-00000040` holding its files (safetensors parts, written by any process)
// and manifest.json, written last: the step, each file's size and SHA-256, and free-form
// metadata (the job's config, the data position, ...). A file `latest` names the newest
// complete checkpoint. Writing happens in a `.partial-step-N-<nonce>` directory: every part
// fsynced, the manifest written and fsynced, the directory renamed into place and its parent
// fsynced, and only then `latest` replaced (written aside, fsynced, renamed). So a crash leaves
// either the previous state or the new one, plus a partial directory that is never read and
// is removed later. No torch, no CAF.
#pragma once

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace actorpipe {

class checkpoint_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A checkpoint file that exists but this process may not read (permissions, an I/O error):
// not damage, so a resume does not pass over it to an older one (that would drop its steps).
class checkpoint_unreadable : public checkpoint_error {
 public:
  using checkpoint_error::checkpoint_error;
};

struct checkpoint_file {
  std::string name;  // inside the checkpoint directory, no '/'
  std::uint64_t bytes = 0;
  std::string sha256;  // lowercase hex
};

struct checkpoint_manifest {
  int format = 1;
  long long step = 0;  // steps completed when it was taken
  std::vector<checkpoint_file> files;
  nlohmann::json meta = nlohmann::json::object();
};

// "step-00000040".
std::string checkpoint_name(long long step);

// The checkpoint directories in `dir` (step-N, complete: partial ones are named otherwise),
// newest first, with their steps; empty where there are none or no such directory.
std::vector<std::pair<long long, std::string>> complete_checkpoints(const std::string& dir);

// SHA-256 of a file, lowercase hex; throws checkpoint_error naming the file when missing,
// checkpoint_unreadable (with the reason) when it cannot be read.
std::string sha256_of_file(const std::string& path);

// SHA-256 of bytes given piece by piece (e.g. as they are written), lowercase hex.
class sha256_stream {
 public:
  sha256_stream();
  ~sha256_stream();
  sha256_stream(const sha256_stream&) = delete;
  sha256_stream& operator=(const sha256_stream&) = delete;
  void update(const void* data, std::size_t bytes);
  std::string hex();  // once, after the last update
 private:
  void* ctx_;  // EVP_MD_CTX
};

// Writes `bytes` to `path` durably (fsynced) and returns its record for a manifest.
checkpoint_file write_checkpoint_part(const std::string& path, const void* data, std::size_t bytes);

// A fresh partial directory name for `step` (".partial-step-00000040-<random>").
std::string partial_checkpoint_name(long long step);

// One checkpoint being written into `dir` (created if missing).
class checkpoint_writer {
 public:
  checkpoint_writer(std::string dir, long long step);
  // The same under a partial directory name chosen elsewhere (every process of a job writes
  // its parts into `dir/partial_name`; created when missing).
  checkpoint_writer(std::string dir, long long step, const std::string& partial_name);
  // Where a part named `name` goes (a process writes its own parts there, then adds them).
  std::string part_path(const std::string& name) const;
  // Writes a part from memory and fsyncs it.
  void write_file(const std::string& name, const void* data, std::size_t bytes);
  // A part already written at part_path(name) (by this process or another): fsynced, sized and
  // hashed from disk.
  void add_file(const std::string& name);
  // A part another process wrote, fsynced and hashed there.
  void add_file(const checkpoint_file& written);
  // The manifest last, then the rename into place and `latest`. Returns the checkpoint's path.
  std::string commit(const nlohmann::json& meta = nlohmann::json::object());
  const std::string& partial_path() const { return partial_; }

 private:
  std::string dir_, partial_;
  long long step_;
  std::vector<checkpoint_file> files_;
};

// Reads `path`'s manifest and checks every file against it (present, size, SHA-256; no
// manifest, a bad manifest or a file that does not match throws checkpoint_error naming it;
// one that cannot be read, checkpoint_unreadable).
checkpoint_manifest verify_checkpoint(const std::string& path);

struct resume_choice {
  std::string path;                  // the checkpoint to load
  checkpoint_manifest manifest;
  std::vector<std::string> refused;  // newer ones that failed verification, each with why
};

// `where` is a checkpoint directory (must verify, or checkpoint_error) or a directory of
// checkpoints: its newest valid one by step (also where a crash left `latest` naming the one
// before), the refused ones listed. A newer one it cannot read (checkpoint_unreadable) is an
// error, not passed over.
// Throws checkpoint_error when none is valid. With before_step, checkpoints of that step or
// later in a directory of them are passed over (neither chosen nor refused).
resume_choice find_resume_checkpoint(const std::string& where, long long before_step = LLONG_MAX);

// Where `where` (a checkpoint, or a folder of them) holds as its newest a checkpoint of step
// `steps` or later: the training it was for is done. That checkpoint, as
// find_resume_checkpoint(where) chooses and verifies it; nullopt where the newest is of an
// earlier step (told by its folder's name or its manifest, no file hashed: a caller that goes on
// to resume verifies it then) or nothing is found.
std::optional<resume_choice> finished_checkpoint(const std::string& where, long long steps);

// find_resume_checkpoint, then `read` on its choice (the caller's load of its files). Where
// `where` is a folder of checkpoints and `read` throws while the chosen one was pruned under it
// (a running job's --keep-last removed it once a newer one was committed), the search goes
// round again; any other failure is `read`'s. Returns the choice `read` took.
resume_choice read_resume_checkpoint(const std::string& where, const std::function<void(const resume_choice&)>& read,
                                     long long before_step = LLONG_MAX);

// One run at a time writes into a folder of checkpoints: two at once would write steps over
// each other's, and each prune the other's partial ones. Holds an exclusive lock (flock) on
// DIR/.lock, made with the folder where missing, for as long as it lives; the file names the
// holder (pid and host), and a process that ends, however, lets go. Throws
// std::invalid_argument naming the folder and the holder when another run holds it, and
// checkpoint_error when the lock file cannot be made.
// A job of several processes gives `job_mark` (from its token): the lock file names it, and
// every other process checks that it sees it there (save_dir_marked_by), so a folder that is
// not shared between machines is found before training rather than at the first save.
// Who holds DIR's lock now ("process 1234 on host", as its .lock says), "" where no run does.
std::string save_dir_holder(const std::string& dir);

// What DIR/latest names ("" where there is none).
std::string read_latest(const std::string& dir);

// Makes DIR/latest name `name` (a checkpoint folder in DIR), durably: written beside it and
// renamed over it. checkpoint_error where it cannot.
void point_latest(const std::string& dir, const std::string& name);

class save_dir_lock {
 public:
  explicit save_dir_lock(const std::string& dir, const std::string& job_mark = "");
  ~save_dir_lock();
  save_dir_lock(const save_dir_lock&) = delete;
  save_dir_lock& operator=(const save_dir_lock&) = delete;
  // Whether a lock the calling thread took holds `dir` (run_pipeline then takes none itself).
  static bool held_by_this_thread(const std::string& dir);

 private:
  int fd_ = -1;
  std::string key_;  // the folder, as held_by_this_thread knows it
};

// Whether DIR/.lock names `job_mark` (save_dir_lock): this process sees the folder the job's
// process 0 holds.
bool save_dir_marked_by(const std::string& dir, const std::string& job_mark);

// The names a folder of checkpoints uses (latest, step-N, .lock, and those of writes in
// flight): a file of another kind under one of them would be replaced or removed.
// A --save-dir holding another run's checkpoints (this run would write steps over them, and
// keep_last prune them) is std::invalid_argument, naming them and what to do; so is a resume
// of an older checkpoint of the folder (two lines of steps in it). Nothing to say where the
// folder holds none, or the run resumes the folder or its newest checkpoint.
void check_save_dir_is_ours(const std::string& save_dir, const std::string& resume, int keep_last);

bool is_checkpoint_store_name(const std::string& name);

// Keeps the newest `keep_last` complete checkpoints (and the one `latest` names) and removes
// the older ones and every partial directory. keep_last <= 0 keeps all. Only checkpoints count
// and go: a step-N folder whose manifest is missing, unreadable or of another step is neither
// (someone's folder, a damaged copy), and one that holds anything its manifest does not list
// (a file or folder of the user's) is left whole, with a warning.
void prune_checkpoints(const std::string& dir, int keep_last);

// The parts of a run's checkpoints that are written on threads of their own while training
// goes on (each optimizer shard writes its stage's file). A checkpoint that cannot complete (a
// part failed, its commit failed, the run failed while it was written) leaves nothing behind:
// its parts in flight stop at their next piece once the run gives them up, and settle() waits
// for them, then removes its partial directory. Thread-safe.
class checkpoint_writes {
 public:
  // A part starts being written into `partial_dir`.
  void begin(const std::string& partial_dir);
  // That part is over: written (its checkpoint may still complete) or not (it cannot).
  void end(const std::string& partial_dir, bool written);
  // Between pieces of a part: throws checkpoint_error once the run gave its parts up.
  void check() const;
  // The checkpoint in `partial_dir` will not complete (its commit failed, or the run stopped
  // while it was written).
  void discard(const std::string& partial_dir);
  // Gives up the parts in flight (the run failed): each stops at its next piece.
  void give_up();
  // Waits up to `limit` until no part is in flight, then removes the partial directories of
  // the checkpoints that cannot complete (after give_up, every one a part was written into
  // that is still there: a commit renames it, so one left was not committed; another
  // process's part written after process 0 removed the folder left it behind). False when
  // parts were still in flight at the limit (their directories are removed all the same).
  bool settle(std::chrono::duration<double> limit);

 private:
  mutable std::mutex m_;
  std::condition_variable idle_;
  int in_flight_ = 0;
  bool given_up_ = false;
  std::set<std::string> discarded_;
  std::set<std::string> begun_;  // every partial directory a part was written into
};

}  // namespace actorpipe
