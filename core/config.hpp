// Job configuration: read from a JSON file, patched by command-line "key=value" overrides, then
// resolved (derived fields filled in) and validated with messages naming the offending values.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace actorpipe {

// JSON keys are the field names. For the integer batching fields and world_size, 0 means
// "not given": resolve_and_validate derives them.
struct job_config {
  // Parallelism.
  int pp = 1;
  int dp = 1;
  int tp = 1;
  int world_size = 0;  // 0: pp * dp * tp

  // Batching. batch_size is samples per optimizer step per data-parallel replica.
  int batch_size = 0;
  int num_microbatches = 0;
  int microbatch_size = 0;
  int global_batch_size = 0;  // microbatch_size * num_microbatches * dp

  // Schedule: a name from the schedule registry; chunks = virtual stages per rank.
  std::string schedule = "1f1b";
  int chunks = 1;

  int zero_stage = 0;
  std::string precision = "fp32";  // fp32 | bf16 | fp16

  // Model: a registered name (gpt is built in) and how its layers are cut (empty: the
  // model's default partition method). The shape keys below are the GPT's.
  std::string model = "gpt";
  std::string partition;
  int layers = 8;
  int hidden = 256;
  int heads = 4;
  int seq_len = 128;
  int vocab = 256;

  // Training.
  int steps = 10;
  std::uint64_t seed = 1234;
  double lr = 3e-4;
  int warmup_steps = 0;
  double grad_clip = 1.0;  // 0: no clipping
  double weight_decay = 0.1;
  double min_lr_ratio = 0.1;  // the decay's floor, a fraction of lr
  std::string lr_decay_style = "linear";  // linear | cosine | constant
  int lr_decay_steps = 0;  // the step the decay reaches its floor at (0: steps)
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;

  // Non-fatal notices from resolve_and_validate (e.g. a value it overrode). Not a JSON key.
  std::vector<std::string> notes;
};

// Starts from the defaults above and sets the keys `j` gives. Throws std::invalid_argument for
// a non-object, an unknown key ("unknown config key 'num_microbatch' (did you mean
// 'num_microbatches'?)") or a value of the wrong type ("config key 'pp' must be an integer,
// got \"four\""). Does not resolve or validate.
job_config config_from_json(const nlohmann::json& j);

// config_from_json on a file (JSON; // and /* */ comments allowed). Errors name the path, and
// for bad JSON the parser's line and column; a key given twice in one object is refused by
// name ("config file 'job.json': key 'pp' is given twice (give each key once)").
// `keys`, when given, gets the file's top-level keys (what it sets: read once, as a pipe can
// be). An empty file that is not a regular one (a pipe another process of the job read first)
// is said to be one.
job_config load_config_file(const std::string& path, std::set<std::string>* keys = nullptr);

// Levenshtein distance (insertions, deletions, substitutions): how far a typo is from a name,
// for "did you mean" hints.
std::size_t edit_distance(const std::string& a, const std::string& b);

// One command-line override: `value` is parsed as the field's type (integers and numbers must
// be the whole text). Throws std::invalid_argument naming the key and the value.
void apply_override(job_config& config, const std::string& key, const std::string& value);
// The same for "key=value" text.
void apply_override(job_config& config, const std::string& assignment);
// Every "key=value" in order; a key given twice is refused ("--set pp is given 2 times: give
// it once"), as a flag given twice is (the last one silently won).
void apply_overrides(job_config& config, const std::vector<std::string>& assignments);
// Whether one of the "key=value" assignments gives `key`.
bool overrides_give(const std::vector<std::string>& assignments, const std::string& key);

// batch_size, num_microbatches and microbatch_size all set and apart, one of them typed (a
// flag, named in `flags` by its key, or an override): which was meant cannot be told (the
// config's rule, the count wins, dropped what was typed with a note). Throws
// std::invalid_argument naming each as given ("--batch-size 8", "--set microbatch_size=3",
// "num_microbatches=2 (the config's)"): "... is not ... x ... = N: give two of the three".
void require_typed_batch_keys_agree(const job_config& c, const std::vector<std::string>& overrides,
                                    const std::map<std::string, std::string>& flags);
// A command line's flag and --set of the same key, both given, are refused (the flag won,
// silently): `flags` holds (flag, key, given) triples. Throws std::invalid_argument naming both.
// Returns whether any of them, or any --set, is given (a job a config file gives, changed).
struct flag_key {
  const char* flag;
  const char* key;
  bool given;
};
bool refuse_flag_and_override(const std::vector<std::string>& assignments, std::initializer_list<flag_key> flags);
// A rule's error about a job a config file gave: the error, then where the job came from,
// "(config file 'job.json')", or "(config file 'job.json', with the flags and --set given over
// it)" where `changed`. The error as it is without a path.
std::string with_config_file(const std::string& error, const std::string& path, bool changed);
// The microbatches a batch given alone is cut into (per replica): 8, or the largest of 4, 2, 1
// that divides it, as train and simulate cut it.
int microbatches_of_batch(int batch_size);

// Fills derived fields and checks every rule; throws std::invalid_argument naming the
// parameter(s) and value(s) of the first rule broken. Calling it again on its result changes
// nothing. Rules, in order:
//
// - schedule names a registered schedule or dynamic policy (first: an unknown name is the
//   error, not a rule it would have changed), message prefixed "schedule: " (not with
//   `plan_from_file`, below).
// - pp, dp, tp >= 1; world_size = pp * dp * tp (derived when 0).
// - precision is fp32, bf16 or fp16; zero_stage is 0..3, and 0 or 1 when pp > 1.
// - model: layers, hidden, heads, seq_len, vocab >= 1; hidden % heads == 0; heads % tp == 0;
//   chunks >= 1; layers >= pp * chunks.
// - training: steps >= 1, lr > 0, grad_clip >= 0, weight_decay >= 0, min_lr_ratio in [0, 1],
//   lr_decay_style linear, cosine or constant,
//   adam_beta1 and adam_beta2 in [0, 1), adam_eps > 0 (a normal float), warmup_steps >= 0 (a note when
//   warmup_steps > steps), lr_decay_steps 0 or past warmup_steps + 1.
// - batching (batch_size B, num_microbatches M, microbatch_size m, global_batch_size G; none
//   may be negative; 0 = not given):
//   1. B not given but G given: B = G / dp (G must be a multiple of dp).
//   2. M and m given: M wins. B not given: B = M * m; else m = B / M (B must be a multiple of
//      M), with a note when that differs from the given m.
//   3. Only M: B is required, m = B / M. Only m: with B, M = B / m (B must be a multiple of
//      m); without B, pp == 1 takes M = 1, B = m, and pp > 1 is an error naming batch_size.
//   4. Neither: pp > 1 is an error ("pp=4 needs num_microbatches or microbatch_size"); pp == 1
//      takes M = 1, m = B, and needs B (no default batch size: a silent one hides a typo).
//   Then G = m * M * dp (an error when G was given and differs), and pp * chunks * M must not
//   exceed max_plan_forwards (core/schedule/plan.hpp).
// - schedule: make_schedule(schedule, {pp, num_microbatches, chunks}) must succeed (for a dynamic
//   policy such as "greedy": make_policies, which has no plan to check); its message comes through
//   prefixed "schedule: ". Not with `plan_from_file`: the plan is read from a file, which is
//   checked against pp, chunks and num_microbatches when it is loaded, so the named
//   schedule's rules do not apply.
void resolve_and_validate(job_config& config, bool plan_from_file = false);

// resolve_and_validate for a request that only shapes a plan (simulate): every rule applies,
// except that a config giving no batch size (batch_size, microbatch_size and global_batch_size
// all 0) skips the batch rules: num_microbatches as given, or 1 when pp == 1 (pp > 1 without
// it is an error naming num_microbatches); the batch sizes stay 0. A config that gives a batch
// size gets the batch rules as train does.
void resolve_for_plan(job_config& config);

// Every JSON key with its value (notes excluded); config_from_json(config_to_json(c)) == c.
nlohmann::json config_to_json(const job_config& config);

}  // namespace actorpipe
