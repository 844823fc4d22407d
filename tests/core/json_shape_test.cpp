#include "core/json_shape.hpp"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>

using namespace actorpipe;

CATCH_TEST_CASE("check_json_shape finds nesting past its bound and a key given twice, and passes the rest", "[config]") {
  const auto deep = [](int levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  CATCH_CHECK(check_json_shape(deep(100)).problem.empty());
  CATCH_CHECK(check_json_shape(deep(101)).problem == "nests deeper than 100 levels");
  CATCH_CHECK(check_json_shape("{\"a\": " + deep(200000) + "}").problem == "nests deeper than 100 levels");
  CATCH_CHECK(check_json_shape("{\"a\": {\"b\": 1}}", false, 1).problem == "nests deeper than 1 levels");
  // Keys: each object its own (one key in two objects is fine), at any depth.
  const json_shape top = check_json_shape(R"({"a": 1, "b": {"a": 2}, "a": 3})");
  CATCH_CHECK(top.problem == "gives the key 'a' twice in one object");
  CATCH_CHECK(top.twice == "a");
  CATCH_CHECK(top.twice_depth == 1);
  const json_shape inner = check_json_shape(R"({"t": [{"x": 1, "x": 1}]})");
  CATCH_CHECK(inner.twice == "x");
  CATCH_CHECK(inner.twice_depth == 3);
  CATCH_CHECK(check_json_shape(R"({"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]})").problem.empty());
  // A key's control bytes are escaped in the text said.
  CATCH_CHECK(check_json_shape("{\"\\u001b\": 1, \"\\u001b\": 2}").problem == "gives the key '\\x1b' twice in one object");
  // Text that is no JSON is the parse's to say; comments only where allowed.
  CATCH_CHECK(check_json_shape("{not json").problem.empty());
  CATCH_CHECK(check_json_shape("{\"a\": 1, // c\n \"a\": 2}", true).twice == "a");
  CATCH_CHECK(check_json_shape("{\"a\": 1, // c\n \"a\": 2}", false).problem.empty());
}

CATCH_TEST_CASE("json_count reads whole numbers from 0 to 2^62 and nothing else", "[config]") {
  using nlohmann::json;
  CATCH_CHECK(json_count(json(0)) == 0);
  CATCH_CHECK(json_count(json::parse("4611686018427387904")) == 4611686018427387904LL);  // 2^62
  CATCH_CHECK(json_count(json::parse("4611686018427387905")) == -1);
  CATCH_CHECK(json_count(json::parse("9223372036854775809")) == -1);  // 2^63 + 1: no negative read
  CATCH_CHECK(json_count(json::parse("-9223372036854775808")) == -1);
  CATCH_CHECK(json_count(json(-3)) == -1);
  CATCH_CHECK(json_count(json(2.0)) == -1);  // a fraction's type, whatever its value
  CATCH_CHECK(json_count(json("7")) == -1);
  CATCH_CHECK(json_count(json()) == -1);
}
