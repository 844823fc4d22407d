// Job configuration: JSON (de)serialization through one field table, overrides, and the
// resolution / validation rules documented in config.hpp.
#include "core/config.hpp"
#include "core/exact_number.hpp"
#include "core/number_text.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <type_traits>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>
#include <variant>

#include "core/json_shape.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/text_file.hpp"

namespace actorpipe {
namespace {

// One table drives from_json, to_json and overrides, so a new field cannot be half-wired.
using member =
    std::variant<int job_config::*, std::uint64_t job_config::*, double job_config::*, std::string job_config::*>;

struct field {
  const char* name;
  member ptr;
};

const std::vector<field>& fields() {
  static const std::vector<field> all = {
      {"pp", &job_config::pp},
      {"dp", &job_config::dp},
      {"tp", &job_config::tp},
      {"world_size", &job_config::world_size},
      {"batch_size", &job_config::batch_size},
      {"num_microbatches", &job_config::num_microbatches},
      {"microbatch_size", &job_config::microbatch_size},
      {"global_batch_size", &job_config::global_batch_size},
      {"schedule", &job_config::schedule},
      {"chunks", &job_config::chunks},
      {"zero_stage", &job_config::zero_stage},
      {"precision", &job_config::precision},
      {"model", &job_config::model},
      {"partition", &job_config::partition},
      {"layers", &job_config::layers},
      {"hidden", &job_config::hidden},
      {"heads", &job_config::heads},
      {"seq_len", &job_config::seq_len},
      {"vocab", &job_config::vocab},
      {"steps", &job_config::steps},
      {"seed", &job_config::seed},
      {"lr", &job_config::lr},
      {"warmup_steps", &job_config::warmup_steps},
      {"grad_clip", &job_config::grad_clip},
      {"weight_decay", &job_config::weight_decay},
      {"min_lr_ratio", &job_config::min_lr_ratio},
      {"lr_decay_style", &job_config::lr_decay_style},
      {"lr_decay_steps", &job_config::lr_decay_steps},
      {"adam_beta1", &job_config::adam_beta1},
      {"adam_beta2", &job_config::adam_beta2},
      {"adam_eps", &job_config::adam_eps},
  };
  return all;
}


[[noreturn]] void unknown_key(const std::string& key) {
  // A flag's name where its key goes (`--set stages=3`, `seq-len`): the key that flag sets.
  std::string as_key = key;
  std::replace(as_key.begin(), as_key.end(), '-', '_');
  for (const auto& [flag, name] : {std::pair<const char*, const char*>{"stages", "pp"},
                                   {"microbatches", "num_microbatches"},
                                   {"zero", "zero_stage"}})
    if (as_key == flag) as_key = name;
  // Megatron's names for what is set otherwise here.
  if (as_key == "min_lr")
    throw std::invalid_argument("unknown config key '" + key + "' (the floor is min_lr_ratio, a fraction of lr: " +
                                "Megatron's min_lr is lr x min_lr_ratio)");
  if (as_key == "lr_decay_iters")
    throw std::invalid_argument("unknown config key '" + key + "' (Megatron's lr_decay_iters: the key is lr_decay_steps)");
  for (const field& f : fields())
    if (as_key == f.name)
      throw std::invalid_argument("unknown config key '" + key + "' (a flag's name: its key is '" + as_key + "')");
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, key.size() / 3) + 1;  // farther is no typo
  for (const field& f : fields()) {
    std::size_t d = edit_distance(key, f.name);
    if (d < best_distance) {
      best_distance = d;
      best = f.name;
    }
  }
  std::string msg = "unknown config key '" + key + "'";
  if (!best.empty()) msg += " (did you mean '" + best + "'?)";
  throw std::invalid_argument(msg);
}

const field& find_field(const std::string& key) {
  for (const field& f : fields())
    if (key == f.name) return f;
  unknown_key(key);
}

std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string shown(double v) { return exact_number_text(v); }  // a refused value as it reads back

[[noreturn]] void wrong_type(const std::string& key, const char* what, const nlohmann::json& v) {
  throw std::invalid_argument("config key '" + key + "' must be " + what + ", got " + shown(v));
}

// Digits past 64 bits: JSON's parser keeps them as a float ("pp": 99999999999999999999 was "must
// be an integer, got 1e+20").
bool whole_past_64_bits(const nlohmann::json& v) {
  if (!v.is_number_float()) return false;
  const double x = v.get<double>();
  return std::isfinite(x) && x == std::floor(x) && std::fabs(x) >= 9223372036854775808.0;
}

void set_from_json(int& out, const std::string& key, const nlohmann::json& v) {
  if (whole_past_64_bits(v)) wrong_type(key, "an integer that fits in 32 bits (this one is past 64 bits)", v);
  if (!v.is_number_integer()) wrong_type(key, "an integer", v);
  if (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT_MAX)
                             : (v.get<std::int64_t>() < INT_MIN || v.get<std::int64_t>() > INT_MAX))
    wrong_type(key, "an integer that fits in 32 bits", v);
  out = static_cast<int>(v.get<std::int64_t>());
}

void set_from_json(std::uint64_t& out, const std::string& key, const nlohmann::json& v) {
  // A JSON literal like 7 may be stored signed; only a negative one is wrong.
  if (whole_past_64_bits(v) && v.get<double>() > 0)
    wrong_type(key, "a non-negative integer below 2^64 (this one is past 64 bits)", v);
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0))
    wrong_type(key, "a non-negative integer", v);
  out = v.get<std::uint64_t>();
}

void set_from_json(double& out, const std::string& key, const nlohmann::json& v) {
  if (!v.is_number()) wrong_type(key, "a number", v);
  out = v.get<double>();
}

// Every string key has a default, and an empty value does not say which one was meant
// (partition "" trained on the model's own cut, where --partition '' is refused).
void set_from_json(std::string& out, const std::string& key, const nlohmann::json& v) {
  if (!v.is_string()) wrong_type(key, "a string", v);
  if (v.get<std::string>().empty()) wrong_type(key, "a non-empty string (leave the key out for its default)", v);
  // A NUL cut the error line that quoted it ("unknown schedule 'zbv"), an ESC reached the terminal.
  if (has_control_bytes(v.get<std::string>())) wrong_type(key, "a string without control characters", v);
  out = v.get<std::string>();
}

[[noreturn]] void bad_override(const std::string& key, const std::string& value, const char* what) {
  throw std::invalid_argument("override " + key + "=" + value + ": " + key + " must be " + what + ", got '" + value +
                              "'");
}

// strtol and friends skip leading blanks and accept a prefix; an override must be the number.
bool plain_number_text(const std::string& value) {
  return !value.empty() && !std::isspace(static_cast<unsigned char>(value.front()));
}

void set_from_text(int& out, const std::string& key, const std::string& value) {
  if (!plain_number_text(value)) bad_override(key, value, "an integer");
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (*end != '\0') bad_override(key, value, "an integer");
  if (errno == ERANGE || v < INT_MIN || v > INT_MAX) bad_override(key, value, "an integer that fits in 32 bits");
  out = static_cast<int>(v);
}

void set_from_text(std::uint64_t& out, const std::string& key, const std::string& value) {
  // strtoull would wrap "-1" around to a huge seed; "-0" is 0, as it is for the other keys.
  const bool minus_zero = value.size() > 1 && value.front() == '-' &&
                          value.find_first_not_of('0', 1) == std::string::npos;
  if (!plain_number_text(value) || (value.front() == '-' && !minus_zero))
    bad_override(key, value, "a non-negative integer");
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(value.c_str() + (minus_zero ? 1 : 0), &end, 10);
  if (*end != '\0') bad_override(key, value, "a non-negative integer");
  if (errno == ERANGE) bad_override(key, value, "a non-negative integer below 2^64 (this one is past 64 bits)");
  out = v;
}

void set_from_text(double& out, const std::string& key, const std::string& value) {
  // Decimal, as the flags and a config's JSON take it (strtod took "0x1p-10" and "inf" too).
  if (!decimal_number_text(value)) bad_override(key, value, "a decimal number");
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (*end != '\0') bad_override(key, value, "a decimal number");
  // ERANGE also flags a number below the normal range (1e-320), which is still one: an
  // overflow to infinity is refused, and one so small it reads as 0 (grad_clip=1e-400 was
  // "no clipping").
  if (!std::isfinite(v)) bad_override(key, value, "a finite number");
  if (v == 0 && errno == ERANGE) bad_override(key, value, "0 or a number a double holds (this one reads as 0)");
  out = v;
}

void set_from_text(std::string& out, const std::string& key, const std::string& value) {
  if (value.empty())
    throw std::invalid_argument("override " + key + "=: " + key + " must not be empty (leave it out for its default)");
  out = value;
}

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument(msg); }

std::string str(long long v) { return std::to_string(v); }

void require_at_least_one(const char* name, int v) {
  if (v < 1) fail(std::string(name) + "=" + str(v) + " must be >= 1");
}

void require_not_negative(const char* name, int v, const char* zero_means) {
  if (v < 0) fail(std::string(name) + "=" + str(v) + " must be >= 0 (0 = " + zero_means + ")");
}

// A product of config integers as an int, or an error naming the factors.
int product_or_fail(const std::string& what, long long value) {
  if (value > INT_MAX) fail(what + " = " + str(value) + " is too large");
  return static_cast<int>(value);
}

void resolve_batching(job_config& c) {
  require_not_negative("batch_size", c.batch_size, "not given");
  require_not_negative("num_microbatches", c.num_microbatches, "not given");
  require_not_negative("microbatch_size", c.microbatch_size, "not given");
  require_not_negative("global_batch_size", c.global_batch_size, "not given");

  int b = c.batch_size, n = c.num_microbatches, m = c.microbatch_size;
  const int g = c.global_batch_size;
  if (b == 0 && g > 0) {
    if (g % c.dp != 0) fail("global_batch_size=" + str(g) + " is not a multiple of dp=" + str(c.dp));
    b = g / c.dp;
  }
  // The batch per replica as given: global_batch_size over dp where only that was given.
  const std::string batch_text = c.batch_size == 0 && g > 0
                                     ? (c.dp == 1 ? "global_batch_size=" + str(g)
                                                  : "global_batch_size=" + str(g) + " / dp=" + str(c.dp) + " = " + str(b))
                                     : "batch_size=" + str(b);
  auto require_multiple = [&](const char* name, int divisor) {
    if (b % divisor != 0) fail(batch_text + " is not a multiple of " + name + "=" + str(divisor));
  };

  if (n > 0 && m > 0) {
    if (b == 0) {
      b = product_or_fail("batch_size = num_microbatches*microbatch_size", static_cast<long long>(n) * m);
    } else {
      // Colossal-AI's rule: the microbatch count wins; the size follows from the batch.
      require_multiple("num_microbatches", n);
      if (b / n != m)
        c.notes.push_back("microbatch_size=" + str(m) + " overridden: num_microbatches=" + str(n) +
                          " wins, so microbatch_size = batch_size/num_microbatches = " + str(b) + "/" + str(n) +
                          " = " + str(b / n));
      m = b / n;
    }
  } else if (n > 0) {
    if (b == 0)
      fail("num_microbatches=" + str(n) + " needs batch_size (or microbatch_size) to derive microbatch_size");
    require_multiple("num_microbatches", n);
    m = b / n;
  } else if (m > 0) {
    if (b == 0) {
      if (c.pp > 1)
        fail("microbatch_size=" + str(m) + " with pp=" + str(c.pp) +
             " needs batch_size (or num_microbatches) to derive num_microbatches");
      b = m;  // one stage, one microbatch: the microbatch is the batch
      n = 1;
    } else {
      require_multiple("microbatch_size", m);
      n = b / m;
    }
  } else {
    if (c.pp > 1) fail("pp=" + str(c.pp) + " needs num_microbatches or microbatch_size");
    if (b == 0)
      fail("batch_size=0: give batch_size, microbatch_size or global_batch_size (there is no default batch size)");
    n = 1;
    m = b;
  }

  long long derived = static_cast<long long>(m) * n * c.dp;
  if (g > 0 && g != derived)
    fail("global_batch_size=" + str(g) + " does not equal microbatch_size*num_microbatches*dp = " + str(m) + "*" +
         str(n) + "*" + str(c.dp) + " = " + str(derived));
  c.global_batch_size = product_or_fail("global_batch_size = microbatch_size*num_microbatches*dp", derived);
  c.batch_size = b;
  c.num_microbatches = n;
  c.microbatch_size = m;
}

}  // namespace

namespace {
// The batch's keys take 0 for "not given" (derived from the others); a 0 given is refused, as
// --microbatches 0 is: it ran the default batch without a word.
bool derived_when_zero(const std::string& key) {
  return key == "batch_size" || key == "num_microbatches" || key == "microbatch_size" || key == "global_batch_size";
}
}  // namespace

job_config config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("config must be a JSON object, got " + shown(j));
  job_config c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const field& f = find_field(it.key());
    std::visit([&](auto ptr) { set_from_json(c.*ptr, it.key(), it.value()); }, f.ptr);
    if (derived_when_zero(it.key()) && it.value() == 0)
      wrong_type(it.key(), "a count >= 1 (leave the key out to derive it from the others)", it.value());
  }
  return c;
}

namespace {
// JSON's parser reads a number too small for a double as 0 ("grad_clip": 1e-400 was "no
// clipping"), and fails on one too large as if the text were no JSON ("lr": 1e400): the text's
// numbers (outside strings and comments) that do, refused by line.
void refuse_numbers_out_of_range(const std::string& text, const std::string& path, std::size_t before = std::string::npos) {
  int line = 1;
  for (std::size_t i = 0; i < text.size() && i < before; ++i) {
    const char ch = text[i];
    if (ch == '\n') ++line;
    if (ch == '"') {  // a string: to its closing quote
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
        else if (text[i] == '\n') ++line;
      }
    } else if (ch == '/' && i + 1 < text.size() && (text[i + 1] == '/' || text[i + 1] == '*')) {
      const bool block = text[i + 1] == '*';
      for (i += 2; i < text.size(); ++i) {
        if (text[i] == '\n') {
          ++line;
          if (!block) break;
        }
        if (block && text[i] == '*' && i + 1 < text.size() && text[i + 1] == '/') {
          ++i;
          break;
        }
      }
    } else if (ch == '-' || std::isdigit(static_cast<unsigned char>(ch))) {
      std::size_t end = i;
      while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || std::strchr("+-.eE", text[end])))
        ++end;
      const std::string number = text.substr(i, end - i);
      errno = 0;
      const double v = std::strtod(number.c_str(), nullptr);
      if (v == 0 && errno == ERANGE)
        fail("config file '" + path + "': the number " + number + " on line " + std::to_string(line) +
             " is too small for a double and reads as 0: give 0, or a number a double holds");
      if (std::isinf(v))
        fail("config file '" + path + "': the number " + number + " on line " + std::to_string(line) +
             " is beyond a double's range (-1.8e308 to 1.8e308)");
      i = end - 1;
    }
  }
}
}  // namespace

job_config load_config_file(const std::string& path, std::set<std::string>* keys_given) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("config file '" + path + "' is a directory, not a JSON file");
  errno = 0;
  std::ifstream in(path);
  if (!in) {
    std::string why = errno != 0 ? std::strerror(errno) : "cannot be read";
    fail("cannot open config file '" + path + "': " + why);
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty() && std::filesystem::is_fifo(path, ec))
    fail("config file '" + path + "' is empty: a pipe gives its text to one reader (under actorpipe launch, every "
         "process reads the config: give a file)");
  // nlohmann::json keeps the last of a key given twice; a config that says pp twice is refused
  // (which one was meant is a guess). Nesting past a bound is refused before a value is made.
  if (const json_shape shape = check_json_shape(text, /*comments=*/true); !shape.twice.empty())
    fail("config file '" + path + "': key '" + shown_text(shape.twice, 200) + "' is given twice (give each key once)");
  else if (!shape.problem.empty())
    fail("config file '" + path + "' " + shape.problem);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception& e) {
    // A number past a double's range fails the parse too: named where it comes before a
    // syntax error (the first error in the text is the one said).
    const auto* syntax = dynamic_cast<const nlohmann::json::parse_error*>(&e);
    refuse_numbers_out_of_range(text, path, syntax ? syntax->byte : std::string::npos);
    fail("config file '" + path + "' is not valid JSON: " + e.what());
  }
  refuse_numbers_out_of_range(text, path);
  if (keys_given && j.is_object())
    for (const auto& item : j.items()) keys_given->insert(item.key());
  try {
    return config_from_json(j);
  } catch (const std::invalid_argument& e) {
    fail("config file '" + path + "': " + e.what());
  }
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

void apply_override(job_config& config, const std::string& key, const std::string& value) {
  const field& f = find_field(key);
  // "-0" and "+00" are 0 too (they trained the default batch).
  const std::size_t sign = !value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0;
  if (derived_when_zero(key) && value.size() > sign && value.find_first_not_of('0', sign) == std::string::npos)
    throw std::invalid_argument("override " + key + "=" + value + ": " + key +
                                " must be >= 1 (leave it out to derive it from the other batch keys)");
  std::visit([&](auto ptr) { set_from_text(config.*ptr, key, value); }, f.ptr);
}

void apply_override(job_config& config, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) fail("override '" + assignment + "' must look like key=value");
  apply_override(config, assignment.substr(0, eq), assignment.substr(eq + 1));
}

void apply_overrides(job_config& config, const std::vector<std::string>& assignments) {
  std::map<std::string, int> times;
  for (const auto& a : assignments) ++times[a.substr(0, a.find('='))];
  for (const auto& a : assignments) {
    const std::string key = a.substr(0, a.find('='));
    if (!key.empty() && times[key] > 1)
      fail("--set " + key + " is given " + std::to_string(times[key]) + " times: give it once");
  }
  for (const auto& a : assignments) apply_override(config, a);
}

bool overrides_give(const std::vector<std::string>& assignments, const std::string& key) {
  return std::any_of(assignments.begin(), assignments.end(),
                     [&key](const std::string& kv) { return kv.rfind(key + "=", 0) == 0; });
}

void require_typed_batch_keys_agree(const job_config& c, const std::vector<std::string>& overrides,
                                    const std::map<std::string, std::string>& flags) {
  const char* keys[] = {"batch_size", "num_microbatches", "microbatch_size"};
  bool typed = false;
  for (const char* key : keys) typed = typed || flags.count(key) || overrides_give(overrides, key);
  const long long product = static_cast<long long>(c.num_microbatches) * c.microbatch_size;
  if (!typed || c.batch_size <= 0 || c.num_microbatches <= 0 || c.microbatch_size <= 0 || c.batch_size == product) return;
  const auto named = [&](const std::string& key, long long v) {
    if (const auto flag = flags.find(key); flag != flags.end()) return flag->second + " " + str(v);
    if (overrides_give(overrides, key)) return "--set " + key + "=" + str(v);
    return key + "=" + str(v) + " (the config's)";
  };
  fail(named("batch_size", c.batch_size) + " is not " + named("num_microbatches", c.num_microbatches) + " x " +
       named("microbatch_size", c.microbatch_size) + " = " + str(product) + ": give two of the three");
}

bool refuse_flag_and_override(const std::vector<std::string>& assignments, std::initializer_list<flag_key> flags) {
  bool any = !assignments.empty();
  for (const flag_key& f : flags) {
    if (f.given && overrides_give(assignments, f.key))
      fail(std::string(f.flag) + " and --set " + f.key + " both give " + f.key + ": give it once");
    any = any || f.given;
  }
  return any;
}

std::string with_config_file(const std::string& error, const std::string& path, bool changed) {
  if (path.empty()) return error;
  return error + " (config file '" + path + "'" + (changed ? ", with the flags and --set given over it)" : ")");
}

int microbatches_of_batch(int batch_size) { return std::gcd(batch_size, 8); }

namespace {

// An unknown schedule name is named first, before any rule it would change the outcome of
// ("schedule=zzz" reported a batch rule the user had not broken).
void require_known_schedule(const std::string& name) {
  if (has_schedule(name) || is_dynamic_policy(name)) return;
  try {
    make_schedule(name, schedule_request{});  // throws "unknown schedule 'zzz' (known: ...)"
  } catch (const std::invalid_argument& e) {
    fail(std::string("schedule: ") + e.what());
  }
}

// The batch rules of a plan-only request that gives no batch size: num_microbatches alone.
void resolve_microbatches_only(job_config& c) {
  require_not_negative("num_microbatches", c.num_microbatches, "not given");
  if (c.num_microbatches > 0) return;
  if (c.pp > 1)
    fail("pp=" + str(c.pp) + " needs num_microbatches (or batch_size with microbatch_size, to derive it)");
  c.num_microbatches = 1;
}

void resolve_rules(job_config& c, bool plan_from_file, bool batch_sizes_optional) {
  if (!plan_from_file) require_known_schedule(c.schedule);

  // Parallelism.
  require_at_least_one("pp", c.pp);
  require_at_least_one("dp", c.dp);
  require_at_least_one("tp", c.tp);
  require_not_negative("world_size", c.world_size, "pp*dp*tp");
  long long world = static_cast<long long>(c.pp) * c.dp * c.tp;
  if (c.world_size == 0) {
    c.world_size = product_or_fail("world_size = pp*dp*tp", world);
  } else if (c.world_size != world) {
    fail("world_size=" + str(c.world_size) + " does not equal pp*dp*tp = " + str(c.pp) + "*" + str(c.dp) + "*" +
         str(c.tp) + " = " + str(world));
  }

  // Numerics and memory.
  if (c.precision != "fp32" && c.precision != "bf16" && c.precision != "fp16")
    fail("precision='" + c.precision + "' must be one of fp32, bf16, fp16");
  if (c.zero_stage < 0 || c.zero_stage > 3) fail("zero_stage=" + str(c.zero_stage) + " must be 0, 1, 2 or 3");
  // ZeRO-2/3 shard gradients / parameters that the pipeline accumulates across microbatches.
  if (c.pp > 1 && c.zero_stage > 1)
    fail("zero_stage=" + str(c.zero_stage) + " is not supported with pp=" + str(c.pp) + ": use 0 or 1");

  // Model.
  require_at_least_one("layers", c.layers);
  require_at_least_one("hidden", c.hidden);
  require_at_least_one("heads", c.heads);
  require_at_least_one("seq_len", c.seq_len);
  require_at_least_one("vocab", c.vocab);
  require_at_least_one("chunks", c.chunks);
  // The built-in transformers' rule; a model of one's own reads the flags its own way.
  if ((c.model == "gpt" || c.model == "bert") && c.hidden % c.heads != 0)
    fail("hidden=" + str(c.hidden) + " is not divisible by heads=" + str(c.heads));
  if (c.heads % c.tp != 0) fail("heads=" + str(c.heads) + " is not divisible by tp=" + str(c.tp));
  long long virtual_stages = static_cast<long long>(c.pp) * c.chunks;
  // The GPT's default partition gives each virtual stage a block; another partition (or another
  // model) counts the model's own layers, which the run's partition checks.
  // A plan alone (simulate) has no model to cut: its layers are not checked.
  if (!batch_sizes_optional && c.model == "gpt" && c.partition.empty() && c.layers < virtual_stages)
    fail("layers=" + str(c.layers) + " cannot be split over pp*chunks = " + str(c.pp) + "*" + str(c.chunks) + " = " +
         str(virtual_stages) + " virtual stages (the default partition gives each a block; partition uniform cuts all " +
         str(c.layers + 3) + " layers, embeddings and head included)");

  // Training.
  require_at_least_one("steps", c.steps);
  if (!(c.lr > 0) || !std::isfinite(c.lr)) fail("lr=" + shown(c.lr) + " must be a finite number > 0");
  if (!(c.grad_clip >= 0) || !std::isfinite(c.grad_clip))
    fail("grad_clip=" + shown(c.grad_clip) + " must be >= 0 (0 = no clipping)");
  if (!(c.weight_decay >= 0) || !std::isfinite(c.weight_decay))
    fail("weight_decay=" + shown(c.weight_decay) + " must be >= 0");
  if (!(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1))
    fail("min_lr_ratio=" + shown(c.min_lr_ratio) + " must be in [0, 1] (a fraction of lr)");
  if (c.lr_decay_style != "linear" && c.lr_decay_style != "cosine" && c.lr_decay_style != "constant")
    fail("lr_decay_style=" + shown(nlohmann::json(c.lr_decay_style)) + " must be linear, cosine or constant");
  for (const auto& [key, beta] : {std::pair<const char*, double>{"adam_beta1", c.adam_beta1}, {"adam_beta2", c.adam_beta2}})
    if (!(beta >= 0 && beta < 1)) fail(std::string(key) + "=" + shown(beta) + " must be in [0, 1)");
  // The update adds it in float: below a float's normal range it is nothing, past it inf.
  if (!(c.adam_eps >= std::numeric_limits<float>::min() && c.adam_eps <= std::numeric_limits<float>::max()))
    fail("adam_eps=" + shown(c.adam_eps) + " must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38");
  require_not_negative("warmup_steps", c.warmup_steps, "no warm-up");
  require_not_negative("lr_decay_steps", c.lr_decay_steps, "the last of steps");
  if (c.lr_decay_steps > 0 && static_cast<long long>(c.lr_decay_steps) <= static_cast<long long>(c.warmup_steps) + 1)
    fail("lr_decay_steps=" + str(c.lr_decay_steps) + " leaves no step to decay over after warmup_steps=" +
         str(c.warmup_steps) + ": " +
         (static_cast<long long>(c.warmup_steps) + 2 <= INT_MAX ? "at least " + str(static_cast<long long>(c.warmup_steps) + 2)
                                                                : std::string("no step count can (lower warmup_steps)")));
  if (c.warmup_steps > c.steps) {
    std::string note = "warmup_steps=" + str(c.warmup_steps) + " exceeds steps=" + str(c.steps) +
                       ": the learning rate never reaches lr";
    if (std::find(c.notes.begin(), c.notes.end(), note) == c.notes.end()) c.notes.push_back(note);
  }

  if (batch_sizes_optional && c.batch_size == 0 && c.microbatch_size == 0 && c.global_batch_size == 0)
    resolve_microbatches_only(c);
  else
    resolve_batching(c);
  const long long forwards = virtual_stages * c.num_microbatches;
  if (forwards > max_plan_forwards)
    fail("pp*chunks*num_microbatches = " + str(c.pp) + "*" + str(c.chunks) + "*" + str(c.num_microbatches) + " = " +
         str(forwards) + " forward passes in one step, more than a plan may hold (" + str(max_plan_forwards) + ")");

  if (plan_from_file) return;
  try {
    // A dynamic policy has no plan to generate: making it for every rank is its check.
    if (is_dynamic_policy(c.schedule))
      make_policies(c.schedule, c.pp, c.num_microbatches, c.chunks);
    else
      make_schedule(c.schedule, schedule_request{c.pp, c.num_microbatches, c.chunks});
  } catch (const std::invalid_argument& e) {
    fail(std::string("schedule: ") + e.what());
  }
}

}  // namespace

void resolve_and_validate(job_config& c, bool plan_from_file) { resolve_rules(c, plan_from_file, false); }

void resolve_for_plan(job_config& c) { resolve_rules(c, false, true); }

nlohmann::json config_to_json(const job_config& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const field& f : fields())
    std::visit(
        [&](auto ptr) {
          using value_type = std::decay_t<decltype(c.*ptr)>;
          if constexpr (std::is_same_v<value_type, std::string>)
            if ((c.*ptr).empty()) return;  // partition's default is no value, which a config leaves out
          if constexpr (std::is_same_v<value_type, int>)
            if (c.*ptr == 0 && derived_when_zero(f.name)) return;  // not given: derived
          j[f.name] = c.*ptr;
        },
        f.ptr);
  return j;
}

}  // namespace actorpipe
