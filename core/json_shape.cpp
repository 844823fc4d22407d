#include "core/json_shape.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <vector>

#include "core/text_file.hpp"

namespace actorpipe {
namespace {

// nlohmann's SAX interface: only nesting and keys are looked at. Returning false stops the parse.
struct shape_reader : nlohmann::json_sax<nlohmann::json> {
  int max_depth = json_depth_limit;
  int depth = 0;
  std::vector<std::set<std::string>> keys;  // per open level (arrays hold an empty set)
  json_shape found;

  bool open() {
    if (++depth > max_depth) {
      found.problem = "nests deeper than " + std::to_string(max_depth) + " levels";
      return false;
    }
    keys.emplace_back();
    return true;
  }
  bool close() {
    --depth;
    keys.pop_back();
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t& k) override {
    if (keys.back().insert(k).second) return true;
    found.problem = "gives the key '" + shown_text(k, 200) + "' twice in one object";
    found.twice = k;
    found.twice_depth = depth;
    return false;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

}  // namespace

json_shape check_json_shape(const std::string& text, bool comments, int max_depth) {
  shape_reader r;
  r.max_depth = max_depth;
  nlohmann::json::sax_parse(text, &r, nlohmann::json::input_format_t::json, /*strict=*/true, comments);
  return r.found;
}

long long json_count(const nlohmann::json& v) {
  constexpr std::uint64_t most = std::uint64_t{1} << 62;
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= most ? static_cast<long long>(v.get<std::uint64_t>()) : -1;
  if (v.is_number_integer()) return v.get<long long>() >= 0 ? v.get<long long>() : -1;  // a negative one
  return -1;
}

}  // namespace actorpipe
