// Atomic checkpoint directories: parts, manifest last, rename, `latest`; verification and the
// choice of what to resume from.
#include "core/checkpoint/checkpoint_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <optional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/folder_probe.hpp"
#include "core/json_shape.hpp"
#include "core/log.hpp"
#include "core/text_file.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what) { throw checkpoint_error(what); }

// A checkpoint's partial directory or a `latest` about to replace the old: a write in flight,
// or one a crash cut short.
bool is_write_in_flight(const std::string& name) { return name.rfind(".partial-", 0) == 0 || name.rfind(".latest-", 0) == 0; }

std::string errno_text() { return std::strerror(errno); }

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) fail("cannot open '" + path + "' to sync it: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) fail("cannot sync '" + path + "': " + why);
}

// Writes `bytes` to `path` (replacing it) and fsyncs it.
void write_durably(const std::string& path, const void* data, std::size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("cannot create '" + path + "': " + errno_text());
  const char* p = static_cast<const char*>(data);
  std::size_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      fail("cannot write '" + path + "': " + why);
    }
    p += n, left -= static_cast<std::size_t>(n);
  }
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) fail("cannot sync '" + path + "': " + why);
}

std::string hex(const unsigned char* d, unsigned n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) s += digits[d[i] >> 4], s += digits[d[i] & 15];
  return s;
}

std::string nonce() { return random_hex(6); }

bool valid_file_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos && n != "manifest.json";
}

// "step-00000040" -> 40; -1 for anything else.
long long step_of(const std::string& name) {
  if (name.size() != 13 || name.rfind("step-", 0) != 0) return -1;
  long long step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

}  // namespace

std::string read_latest(const std::string& dir) {
  std::ifstream f(dir + "/latest");
  std::string name;
  if (f) std::getline(f, name);
  return name;
}

std::vector<std::pair<long long, std::string>> complete_checkpoints(const std::string& dir) {
  std::vector<std::pair<long long, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const long long step = step_of(name);
    if (step >= 0 && e.is_directory()) out.emplace_back(step, name);
  }
  std::sort(out.rbegin(), out.rend());  // newest first
  return out;
}

std::string checkpoint_name(long long step) {
  if (step < 0 || step > 99999999) fail("checkpoint step=" + std::to_string(step) + " outside [0, 99999999]");
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", step);
  return buf;
}

sha256_stream::sha256_stream() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
    fail("SHA-256 is not available");
  }
}

sha256_stream::~sha256_stream() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void sha256_stream::update(const void* data, std::size_t bytes) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, bytes);
}

std::string sha256_stream::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &n);
  return actorpipe::hex(digest, n);
}

namespace {
// A file that did not open: missing (damage) or unreadable (not damage: the reason).
[[noreturn]] void open_failed(const std::string& path, int err, const std::string& missing) {
  if (err == ENOENT || err == ENOTDIR) fail(path + ": " + missing);
  throw checkpoint_unreadable("cannot read '" + path + "': " + (err != 0 ? std::strerror(err) : "unknown error"));
}
}  // namespace

std::string sha256_of_file(const std::string& path) {
  errno = 0;
  std::ifstream f(path, std::ios::binary);
  if (!f) open_failed(path, errno, "missing");
  sha256_stream h;
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (f.gcount() > 0) h.update(buf.data(), static_cast<std::size_t>(f.gcount()));
  }
  if (f.bad()) throw checkpoint_unreadable("cannot read '" + path + "' to its end (an I/O error)");
  return h.hex();
}

checkpoint_writer::checkpoint_writer(std::string dir, long long step)
    : checkpoint_writer(std::move(dir), step, partial_checkpoint_name(step)) {}

checkpoint_writer::checkpoint_writer(std::string dir, long long step, const std::string& partial_name)
    : dir_(std::move(dir)), step_(step) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail("cannot create the checkpoint directory '" + dir_ + "': " + ec.message());
  partial_ = dir_ + "/" + partial_name;
  if (::mkdir(partial_.c_str(), 0755) != 0 && errno != EEXIST) fail("cannot create '" + partial_ + "': " + errno_text());
}

std::string partial_checkpoint_name(long long step) { return ".partial-" + checkpoint_name(step) + "-" + nonce(); }

checkpoint_file write_checkpoint_part(const std::string& path, const void* data, std::size_t bytes) {
  write_durably(path, data, bytes);
  return {fs::path(path).filename().string(), bytes, sha256_of_file(path)};
}

void checkpoint_writer::add_file(const checkpoint_file& written) {
  if (!valid_file_name(written.name)) fail("checkpoint file name '" + written.name + "' must be a plain file name");
  files_.push_back(written);
}

std::string checkpoint_writer::part_path(const std::string& name) const {
  if (!valid_file_name(name)) fail("checkpoint file name '" + name + "' must be a plain file name (not manifest.json)");
  return partial_ + "/" + name;
}

void checkpoint_writer::write_file(const std::string& name, const void* data, std::size_t bytes) {
  write_durably(part_path(name), data, bytes);
  add_file(name);
}

void checkpoint_writer::add_file(const std::string& name) {
  const std::string path = part_path(name);
  fsync_path(path, false);
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  if (ec) fail("checkpoint part '" + path + "': " + ec.message());
  files_.push_back({name, bytes, sha256_of_file(path)});
}

namespace {
checkpoint_manifest read_manifest(const std::string& path);  // below

// The names a checkpoint's manifest lists (with manifest.json), if `path` is one of the run's
// checkpoints: a manifest that reads, of the step its folder is named after. Nothing else.
std::optional<std::set<std::string>> checkpoint_own_files(const std::string& path, long long step) {
  try {
    const checkpoint_manifest m = read_manifest(path);
    if (m.step != step) return std::nullopt;
    std::set<std::string> names{"manifest.json"};
    for (const auto& f : m.files) names.insert(f.name);
    return names;
  } catch (const checkpoint_error&) {
    return std::nullopt;
  }
}
}  // namespace

std::string checkpoint_writer::commit(const nlohmann::json& meta) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& f : files_) files[f.name] = {{"bytes", f.bytes}, {"sha256", f.sha256}};
  const nlohmann::json manifest = {{"format", 1}, {"step", step_}, {"files", files}, {"meta", meta}};
  const std::string text = manifest.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";  // a path that is not UTF-8: U+FFFD
  write_durably(partial_ + "/manifest.json", text.data(), text.size());
  fsync_path(partial_, true);
  const std::string name = checkpoint_name(step_), final_path = dir_ + "/" + name;
  std::error_code ec;
  if (fs::exists(final_path, ec)) {
    // A retake of the same step replaces that checkpoint. Anything else under its name is
    // someone's (a folder made while the run went on), which was removed, contents and all:
    // it stays, and this checkpoint fails.
    const auto own = checkpoint_own_files(final_path, step_);
    bool only_own = own.has_value();
    for (const auto& e : fs::directory_iterator(final_path, ec))
      if (only_own && !own->count(e.path().filename().string())) only_own = false;
    if (!only_own)
      fail("'" + final_path + "' exists and is not only a checkpoint of step " + std::to_string(step_) +
           " (a folder made while the run went on?): it is left as it is, and this checkpoint is not written");
    fs::remove_all(final_path, ec);
  }
  if (::rename(partial_.c_str(), final_path.c_str()) != 0)
    fail("cannot rename '" + partial_ + "' to '" + final_path + "': " + errno_text());
  // Renamed, the checkpoint is complete and --resume takes it (the newest valid one by step,
  // whatever `latest` says): what fails from here costs `latest` only, and is said so.
  try {
    point_latest(dir_, name);
  } catch (const checkpoint_error& e) {
    log_warn("checkpoint " + final_path + " is complete, but " + dir_ + "/latest was not updated (" + e.what() +
             "): --resume takes the newest complete checkpoint all the same");
  }
  return final_path;
}

void point_latest(const std::string& dir, const std::string& name) {
  const std::string latest_tmp = dir + "/.latest-" + nonce(), latest_text = name + "\n";
  try {
    fsync_path(dir, true);
    write_durably(latest_tmp, latest_text.data(), latest_text.size());
    if (::rename(latest_tmp.c_str(), (dir + "/latest").c_str()) != 0)
      fail("cannot replace '" + dir + "/latest': " + errno_text());
    fsync_path(dir, true);
  } catch (const checkpoint_error&) {
    std::error_code ec;
    fs::remove(latest_tmp, ec);
    throw;
  }
}

namespace {
// `path`'s manifest as written (format, step, meta, files), without checking it against the
// folder: checkpoint_error naming it when it is missing or does not read, checkpoint_unreadable
// when it cannot be opened for another reason.
checkpoint_manifest read_manifest(const std::string& path) {
  const std::string manifest_path = path + "/manifest.json";
  errno = 0;
  std::ifstream f(manifest_path);
  if (!f) open_failed(manifest_path, errno, "missing (an incomplete checkpoint)");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // Nested past a bound, its meta's copy overflowed the stack (SIGSEGV).
  if (const json_shape shape = check_json_shape(text); !shape.problem.empty()) fail(manifest_path + ": " + shape.problem);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(manifest_path + ": not valid JSON: " + e.what());
  }
  checkpoint_manifest m;
  try {
    // Whole numbers: 1.9 read as format 1 and 2.7 as step 2; a negative step reached the
    // learning rate's schedule (an actor's unhandled exception).
    const auto whole = [&](const char* key) {
      const long long n = json_count(j.at(key));
      if (n < 0) fail(std::string(key) + " " + shown_text(j.at(key).dump(), 80) + " is not a whole number >= 0");
      return n;
    };
    m.format = static_cast<int>(std::min(whole("format"), 1ll << 30));
    m.step = whole("step");
    if (j.contains("meta")) {
      if (!j.at("meta").is_object()) fail("meta is not a JSON object");
      m.meta = j.at("meta");
    }
    for (auto& [name, e] : j.at("files").items())
      m.files.push_back({name, e.at("bytes").get<std::uint64_t>(), e.at("sha256").get<std::string>()});
  } catch (const std::exception& e) {
    fail(manifest_path + ": " + e.what());
  }
  return m;
}
}  // namespace

checkpoint_manifest verify_checkpoint(const std::string& path) {
  const std::string manifest_path = path + "/manifest.json";
  const checkpoint_manifest m = read_manifest(path);
  if (m.format != 1) fail(manifest_path + ": format " + std::to_string(m.format) + " (this build reads format 1)");
  // The step its name says (the newest is chosen by name) must be the step it holds.
  const fs::path as_named = fs::path(path).has_filename() ? fs::path(path) : fs::path(path).parent_path();
  if (const long long named = step_of(as_named.filename().string()); named >= 0 && named != m.step)
    fail(manifest_path + ": step " + std::to_string(m.step) + ", where its folder's name says step " + std::to_string(named));
  for (const auto& file : m.files) {
    if (!valid_file_name(file.name)) fail(manifest_path + ": bad file name '" + file.name + "'");
    const std::string p = path + "/" + file.name;
    std::error_code ec;
    const auto bytes = fs::file_size(p, ec);
    if (ec) fail(p + ": missing (the manifest lists it)");
    if (bytes != file.bytes)
      fail(p + ": " + std::to_string(bytes) + " bytes, the manifest says " + std::to_string(file.bytes) +
           (bytes < file.bytes ? " (truncated?)" : " (written to since?)"));
    if (sha256_of_file(p) != file.sha256) fail(p + ": SHA-256 does not match the manifest (altered)");
  }
  return m;
}

resume_choice find_resume_checkpoint(const std::string& where, long long before_step) {
  resume_choice c;
  std::error_code ec;
  if (!fs::exists(where, ec)) fail("--resume '" + where + "': does not exist");
  if (!fs::is_directory(where, ec)) fail("--resume '" + where + "': not a directory");
  // "ckpt/step-00000004/" names the step too (its filename() is empty).
  const std::string named = fs::path(where).has_filename() ? fs::path(where).filename().string()
                                                            : fs::path(where).parent_path().filename().string();
  if (fs::exists(where + "/manifest.json", ec) || step_of(named) >= 0) {
    c.path = where;
    c.manifest = verify_checkpoint(where);
    return c;
  }
  // Newest first. `latest` names the newest too, except after a crash between a checkpoint's
  // rename into place and `latest`'s: that checkpoint is complete (its manifest is checked
  // below), so it is taken.
  // A folder a running job saves into with --keep-last: the checkpoint being read can be pruned
  // under the reader, once a newer one is committed ("no valid checkpoint" while the folder
  // held a complete, newer one). A failure while the folder's checkpoints changed sends the
  // search round again.
  std::vector<std::string> passed_over;  // of before_step or later
  for (int round = 0;; ++round) {
    const auto all = complete_checkpoints(where);
    passed_over.clear();
    c.refused.clear();
    bool pruned = false;
    for (const auto& [step, name] : all) {
      if (step >= before_step) {
        passed_over.push_back(name);
        continue;
      }
      try {
        c.manifest = verify_checkpoint(where + "/" + name);
        c.path = where + "/" + name;
        return c;
      } catch (const checkpoint_unreadable& e) {
        // Passing over it would resume from an older step and drop its steps without a word.
        throw checkpoint_unreadable("--resume '" + where + "': " + e.what() + " (its newest checkpoint, " + name +
                                    ", is not passed over for an older one: make it readable, or resume from an older "
                                    "one by its path)");
      } catch (const checkpoint_error& e) {
        // Pruned while read: it is gone, or going (its files first), and a newer one is there.
        if (round < 20 && complete_checkpoints(where) != all) {
          pruned = true;
          break;
        }
        c.refused.push_back(e.what());
      }
    }
    if (!pruned) break;
  }
  std::string why;
  for (auto& r : c.refused) why += (why.empty() ? " " : "; ") + r;
  std::string later;
  for (const auto& name : passed_over) later += (later.empty() ? "" : ", ") + name;
  if (!later.empty()) later = " before step " + std::to_string(before_step) + " (" + later + " passed over: no step left after it)";
  fail("--resume '" + where + "': no valid checkpoint" + later +
       (why.empty() ? (later.empty() ? " (none written)" : "") : ":" + why));
}

std::optional<resume_choice> finished_checkpoint(const std::string& where, long long steps) {
  std::error_code ec;
  if (!fs::is_directory(where, ec)) return std::nullopt;
  const std::string named = fs::path(where).has_filename() ? fs::path(where).filename().string()
                                                            : fs::path(where).parent_path().filename().string();
  long long newest = -1;  // the newest checkpoint's step, as named (verify_checkpoint holds the manifest to it)
  try {
    if (fs::exists(where + "/manifest.json", ec) || step_of(named) >= 0)
      newest = step_of(named) >= 0 ? step_of(named) : read_manifest(where).step;
    else if (const auto all = complete_checkpoints(where); !all.empty())
      newest = all.front().first;
    if (newest < steps) return std::nullopt;
    resume_choice c = find_resume_checkpoint(where);
    if (c.manifest.step < steps) return std::nullopt;  // the newest did not verify: an older one was taken
    return c;
  } catch (const checkpoint_error&) {  // said as a resume from it says it
    return std::nullopt;
  }
}

resume_choice read_resume_checkpoint(const std::string& where, const std::function<void(const resume_choice&)>& read,
                                     long long before_step) {
  for (int round = 0;; ++round) {
    resume_choice c = find_resume_checkpoint(where, before_step);
    try {
      read(c);
      return c;
    } catch (const std::exception&) {
      // Gone or going: its manifest or one of its files is no longer there (a prune removes the
      // files first, the folder last).
      const bool pruned = [&] {
        std::error_code ec;
        if (c.path == where) return false;  // the one named: nothing else to choose
        if (!fs::exists(c.path + "/manifest.json", ec)) return true;
        for (const auto& f : c.manifest.files)
          if (!fs::exists(c.path + "/" + f.name, ec)) return true;
        return false;
      }();
      if (!pruned) throw;
      // A writer that prunes faster than this reader reads: its error ("cannot open ...") would
      // read as a damaged checkpoint.
      if (round >= 20)
        throw checkpoint_error("--resume '" + where + "': the checkpoint chosen was pruned while it was read, " +
                               std::to_string(round + 1) +
                               " times in a row (a run saving into this folder with --keep-last, faster than its "
                               "checkpoints can be read?): copy its newest checkpoint elsewhere and give that, or stop "
                               "that run");
    }
  }
}

void prune_checkpoints(const std::string& dir, int keep_last) {
  const auto all = complete_checkpoints(dir);
  const std::string latest = read_latest(dir);
  const long long newest = all.empty() ? -1 : all.front().first;
  std::error_code ec;
  int kept = 0;
  if (keep_last > 0)
    for (const auto& [step, name] : all) {
      const std::string path = dir + "/" + name;
      const auto own = checkpoint_own_files(path, step);
      if (!own) continue;  // not a checkpoint of a run (no manifest, another step's): neither counted nor removed
      if (kept++ < keep_last || name == latest) continue;
      // A checkpoint holds its manifest's files only: anything else is someone's own (notes,
      // another run's save folder), which pruning must not delete with it.
      std::string foreign;
      for (const auto& e : fs::directory_iterator(path, ec))
        if (!own->count(e.path().filename().string())) {
          foreign = e.path().filename().string();
          if (e.is_directory(ec)) foreign = "a folder, " + foreign + ",";
          break;
        }
      if (!foreign.empty()) {
        // Once a folder: every later save saw it again (a line a step with --save-every 1).
        static std::mutex warned_mu;
        static std::set<std::string> warned;
        bool first = false;
        {
          std::lock_guard<std::mutex> lock(warned_mu);
          first = warned.insert(fs::weakly_canonical(path, ec).string() + "\n" + foreign).second;
        }
        if (first)
          log_warn("--keep-last: not removing " + path + ": it holds " + foreign +
                   " that is not the checkpoint's (move it out, then remove the checkpoint yourself; said once)");
        continue;
      }
      fs::remove_all(path, ec);
    }
  // Partial directories of steps no newer than the newest complete one: crashed writes.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".latest-", 0) == 0) {  // a `latest` a crash left unrenamed
      fs::remove(e.path(), ec);
      continue;
    }
    if (name.rfind(".partial-step-", 0) != 0 || name.size() < 22) continue;
    const long long step = step_of(name.substr(9, 13));
    if (step >= 0 && step <= newest) fs::remove_all(e.path(), ec);
  }
}

void checkpoint_writes::begin(const std::string& partial_dir) {
  std::lock_guard<std::mutex> lock(m_);
  ++in_flight_;
  begun_.insert(partial_dir);
}

void checkpoint_writes::end(const std::string& partial_dir, bool written) {
  std::lock_guard<std::mutex> lock(m_);
  if (!written) discarded_.insert(partial_dir);
  if (--in_flight_ == 0) idle_.notify_all();
}

void checkpoint_writes::check() const {
  std::lock_guard<std::mutex> lock(m_);
  if (given_up_) throw checkpoint_error("the run stopped before this checkpoint was complete");
}

void checkpoint_writes::discard(const std::string& partial_dir) {
  std::lock_guard<std::mutex> lock(m_);
  discarded_.insert(partial_dir);
}

void checkpoint_writes::give_up() {
  std::lock_guard<std::mutex> lock(m_);
  given_up_ = true;
}

bool checkpoint_writes::settle(std::chrono::duration<double> limit) {
  std::unique_lock<std::mutex> lock(m_);
  const bool idle = idle_.wait_for(lock, limit, [&] { return in_flight_ == 0; });
  std::error_code ec;
  for (const auto& d : discarded_) fs::remove_all(d, ec);  // a renamed (committed) one is gone: nothing to do
  discarded_.clear();
  if (given_up_)
    for (const auto& d : begun_) fs::remove_all(d, ec);
  begun_.clear();
  return idle;
}

namespace {
// The folders this process's locks hold, and the thread that took each.
std::mutex held_mutex;
std::map<std::string, std::thread::id>& held_folders() {
  static std::map<std::string, std::thread::id> held;
  return held;
}
std::string folder_key(const std::string& dir) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(dir, ec);
  return ec ? dir : p.string();
}
}  // namespace

namespace {
// The first line of a held .lock, "process <pid> on <host>" (save_dir_lock writes it), without
// trailing blanks; "" where it holds none.
std::string lock_holder_line(int fd) {
  char text[256] = {0};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string who = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string();
  who = who.substr(0, who.find('\n'));
  while (!who.empty() && who.back() == ' ') who.pop_back();
  return who;
}
}  // namespace

bool save_dir_lock::held_by_this_thread(const std::string& dir) {
  std::lock_guard<std::mutex> lock(held_mutex);
  const auto it = held_folders().find(folder_key(dir));
  return it != held_folders().end() && it->second == std::this_thread::get_id();
}

save_dir_lock::save_dir_lock(const std::string& dir, const std::string& job_mark) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot make --save-dir '" + dir + "': " + ec.message());
  const std::string path = (fs::path(dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot make '" + path + "': " + errno_text());
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    const std::string who = lock_holder_line(fd_);
    ::close(fd_);
    fd_ = -1;
    if (why != EWOULDBLOCK) fail("cannot lock '" + path + "': " + std::strerror(why));
    throw std::invalid_argument("--save-dir '" + dir + "' is in use by another run" +
                                (who.empty() ? std::string() : " (" + who + ")") +
                                ", which holds its lock file .lock: two runs in one folder would write over and prune "
                                "each other's checkpoints; save into another folder, or wait until that run ends");
  }
  key_ = folder_key(dir);
  {
    std::lock_guard<std::mutex> lock(held_mutex);
    held_folders()[key_] = std::this_thread::get_id();
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::string who = "process " + std::to_string(getpid()) + " on " + host + "\n" +
                          (job_mark.empty() ? std::string() : "job " + job_mark + "\n");
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, who.data(), who.size(), 0);
  }
  // With the lock held, every write in flight is a dead run's: a process killed while it saved
  // left its partial directory (pruning takes only those of steps already complete, and a
  // resumed run saves the next step again). Left, they would fill the disk and fail every save.
  std::uintmax_t bytes = 0;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_write_in_flight(name)) continue;
    std::error_code size_ec;
    for (const auto& f : fs::recursive_directory_iterator(e.path(), size_ec))
      if (f.is_regular_file(size_ec)) bytes += f.file_size(size_ec);
    if (e.is_regular_file(size_ec)) bytes += e.file_size(size_ec);
    std::error_code rm_ec;
    fs::remove_all(e.path(), rm_ec);
    removed += !rm_ec;
  }
  if (removed > 0)
    log_info("--save-dir " + dir + ": removed " + std::to_string(removed) + " unfinished write" + (removed == 1 ? "" : "s") +
             " of a run that ended while it saved (" + std::to_string(bytes / (1024 * 1024)) + " MiB)");
}

std::string save_dir_holder(const std::string& dir) {
  const std::string path = (fs::path(dir) / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    holder = lock_holder_line(fd);
    if (holder.empty()) holder = "a process";
  }
  ::close(fd);  // and with it a lock it took
  return holder;
}

save_dir_lock::~save_dir_lock() {
  if (fd_ >= 0) ::close(fd_);  // and with it the lock
  std::lock_guard<std::mutex> lock(held_mutex);
  if (!key_.empty()) held_folders().erase(key_);
}

bool save_dir_marked_by(const std::string& dir, const std::string& job_mark) {
  std::ifstream f(fs::path(dir) / ".lock");
  for (std::string line; std::getline(f, line);)
    if (line == "job " + job_mark) return true;
  return false;
}

// Taken only by the run that continues the folder's checkpoints: a --resume of the folder (or
// of its newest checkpoint). A restart of the job that wrote them does not ask.
void check_save_dir_is_ours(const std::string& save_dir, const std::string& resume, int keep_last) {
  const auto existing = complete_checkpoints(save_dir);
  if (existing.empty()) return;
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(save_dir, ec);
  if (!resume.empty()) {
    const fs::path from = fs::weakly_canonical(resume, ec);
    if (from == dir) return;  // its newest valid checkpoint
    if (from.parent_path() == dir) {
      // An older checkpoint of the folder would start a second line of steps beside the first:
      // `latest`, --keep-last and a restart (which takes the newest) would mix the two.
      const std::string name = from.filename().string();
      std::string newer;
      for (const auto& [step, other] : existing)
        if (other > name) newer = newer.empty() ? other : other + ", " + newer;
      if (newer.empty()) return;
      throw std::invalid_argument("--resume " + resume + " is not the newest checkpoint in --save-dir '" + save_dir +
                                  "' (" + newer + " came after it): going on from it there would mix two runs' "
                                  "checkpoints, and a restart would take the newest: save into another folder");
    }
  }
  // Folders named like checkpoints without a manifest of their step are no run to continue.
  std::vector<std::pair<long long, std::string>> runs;
  for (const auto& e : existing)
    if (checkpoint_own_files(save_dir + "/" + e.second, e.first)) runs.push_back(e);
  if (runs.empty()) {
    std::string names;
    for (const auto& [step, name] : existing) names += (names.empty() ? "" : ", ") + name;
    throw std::invalid_argument("--save-dir '" + save_dir + "' holds " + names + ", named as this run names its "
                                "checkpoints but no checkpoint (no manifest of its step: an incomplete one, or a "
                                "folder of someone's): this run would write beside " +
                                (existing.size() == 1 ? "it" : "them") + ": move " + (existing.size() == 1 ? "it" : "them") +
                                " out, or save into another folder");
  }
  const std::string span = runs.size() == 1 ? runs.front().second : runs.back().second + " .. " + runs.front().second;
  throw std::invalid_argument("--save-dir '" + save_dir + "' holds " + std::to_string(runs.size()) +
                              (runs.size() == 1 ? " checkpoint" : " checkpoints") + " of another run (" + span +
                              "), which this run would write over or mix with" + (keep_last > 0 ? ", and prune" : "") +
                              ": continue that run with --resume " + save_dir + ", or save into another folder");
}

bool is_checkpoint_store_name(const std::string& name) {
  if (is_write_in_flight(name)) return true;
  const bool step_dir = name.size() > 5 && name.rfind("step-", 0) == 0 &&
                        std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
  return step_dir || name == "latest" || name == ".lock";
}

}  // namespace actorpipe
