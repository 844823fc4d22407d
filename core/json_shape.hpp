// What a JSON text a user hands us (config, checkpoint manifest, safetensors header, trace)
// must not be before it is parsed into a value: nested past a bound (nlohmann::json copies,
// prints and compares a value recursively: 80,000 levels overflowed the stack, SIGSEGV), or
// with a key given twice in one object (the parser keeps the last one without a word). Found in
// one pass of nlohmann's SAX parser; the callback parser found duplicates in quadratic time
// (each object's end scans its parent: 400,000 tensors took minutes).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace actorpipe {

inline constexpr int json_depth_limit = 100;

struct json_shape {
  std::string problem;    // "" when the text's shape is fine (or it is not JSON: the parse says so)
  std::string twice;      // the key given twice, where that is the problem
  int twice_depth = 0;    // the depth of its object (1: the top level's keys)
};

// Checks `text` (comments skipped where `comments`); stops at the first problem:
// "nests deeper than 100 levels" or "gives the key 'x' twice in one object".
json_shape check_json_shape(const std::string& text, bool comments = false, int max_depth = json_depth_limit);

// `v` as a count a file holds (a step, a format number): a whole number in [0, 2^62], or -1
// where it is none (another type, a fraction, a negative number, one past 2^62). Read as
// unsigned where it is one: get<long long> took 2^63 + 1 as a negative number.
long long json_count(const nlohmann::json& v);

}  // namespace actorpipe
