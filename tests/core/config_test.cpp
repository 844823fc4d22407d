// Tests for core/config: JSON parsing and its errors, overrides, files, the round trip, and one
// passing and one failing case for every resolve_and_validate rule.
#include "core/config.hpp"
#include "core/exact_number.hpp"
#include "core/number_text.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include <catch2/catch.hpp>

using namespace actorpipe;
using nlohmann::json;

namespace {

// A config that resolves as is: pp=1, batch_size given.
job_config base() {
  job_config c;
  c.batch_size = 8;
  return c;
}

job_config resolved(job_config c) {
  resolve_and_validate(c);
  return c;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("actorpipe_config_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

}  // namespace

CATCH_TEST_CASE("config_from_json starts from the defaults and sets given keys", "[config]") {
  job_config c = config_from_json(json::object());
  CATCH_CHECK(c.pp == 1);
  CATCH_CHECK(c.dp == 1);
  CATCH_CHECK(c.tp == 1);
  CATCH_CHECK(c.world_size == 0);
  CATCH_CHECK(c.batch_size == 0);
  CATCH_CHECK(c.schedule == "1f1b");
  CATCH_CHECK(c.chunks == 1);
  CATCH_CHECK(c.precision == "fp32");
  CATCH_CHECK(c.layers == 8);
  CATCH_CHECK(c.hidden == 256);
  CATCH_CHECK(c.seed == 1234);
  CATCH_CHECK(c.lr == 3e-4);
  CATCH_CHECK(c.grad_clip == 1.0);
  CATCH_CHECK(c.weight_decay == 0.1);
  CATCH_CHECK(c.min_lr_ratio == 0.1);
  CATCH_CHECK(c.lr_decay_style == "linear");
  CATCH_CHECK(c.adam_beta1 == 0.9);
  CATCH_CHECK(c.adam_beta2 == 0.95);
  CATCH_CHECK(c.adam_eps == 1e-8);

  c = config_from_json(json{{"pp", 4}, {"lr", 1}, {"schedule", "gpipe"}, {"seed", 7}, {"grad_clip", 0.5}});
  CATCH_CHECK(c.pp == 4);
  CATCH_CHECK(c.lr == 1.0);  // an integer is a fine number
  CATCH_CHECK(c.schedule == "gpipe");
  CATCH_CHECK(c.seed == 7);
  CATCH_CHECK(c.grad_clip == 0.5);
}

CATCH_TEST_CASE("config_from_json names unknown keys and suggests the close one", "[config]") {
  CATCH_CHECK_THROWS_AS(config_from_json(json{{"num_microbatch", 4}}), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"num_microbatch", 4}}),
                          "unknown config key 'num_microbatch' (did you mean 'num_microbatches'?)");
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"precison", "bf16"}}), Catch::Contains("did you mean 'precision'"));
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"banana", 1}}), "unknown config key 'banana'");
  // A flag's name given as a key: the key that flag sets (no suggestion came for `stages`).
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"stages", 3}}), "unknown config key 'stages' (a flag's name: its key is 'pp')");
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"seq-len", 3}}), "unknown config key 'seq-len' (a flag's name: its key is 'seq_len')");
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"microbatches", 3}}),
                          "unknown config key 'microbatches' (a flag's name: its key is 'num_microbatches')");
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"notes", json::array()}}), Catch::Contains("unknown config key 'notes'"));
}

CATCH_TEST_CASE("config_from_json names the key and shows the value of a wrong type", "[config]") {
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"pp", "four"}}), "config key 'pp' must be an integer, got \"four\"");
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"layers", 2.5}}),
                          Catch::Contains("config key 'layers' must be an integer, got 2.5"));
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"dp", nullptr}}), Catch::Contains("'dp' must be an integer, got null"));
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"steps", 5000000000LL}}),
                          Catch::Contains("'steps'") && Catch::Contains("5000000000"));
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"lr", "fast"}}), "config key 'lr' must be a number, got \"fast\"");
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"schedule", 3}}), "config key 'schedule' must be a string, got 3");
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"seed", -1}}),
                          "config key 'seed' must be a non-negative integer, got -1");
  CATCH_CHECK_THROWS_WITH(config_from_json(json::array({1, 2})), Catch::Contains("must be a JSON object"));
}

CATCH_TEST_CASE("apply_override parses the value as the field's type", "[config]") {
  job_config c;
  apply_override(c, "pp", "4");
  apply_override(c, "lr", "1e-3");
  apply_override(c, "schedule", "interleaved");
  apply_override(c, "seed", "18446744073709551615");
  apply_override(c, "num_microbatches=16");
  apply_override(c, "precision=bf16");
  CATCH_CHECK(c.pp == 4);
  CATCH_CHECK(c.lr == 1e-3);
  CATCH_CHECK(c.schedule == "interleaved");
  CATCH_CHECK(c.seed == 18446744073709551615ULL);
  CATCH_CHECK(c.num_microbatches == 16);
  CATCH_CHECK(c.precision == "bf16");

  CATCH_CHECK_THROWS_WITH(apply_override(c, "pp", "four"), Catch::Contains("pp") && Catch::Contains("'four'"));
  CATCH_CHECK_THROWS_WITH(apply_override(c, "pp", "4x"), Catch::Contains("pp must be an integer, got '4x'"));
  CATCH_CHECK_THROWS_WITH(apply_override(c, "pp", ""), Catch::Contains("pp must be an integer"));
  CATCH_CHECK_THROWS_WITH(apply_override(c, "pp", " 4"), Catch::Contains("pp must be an integer"));
  CATCH_CHECK_THROWS_WITH(apply_override(c, "pp", "99999999999"), Catch::Contains("'99999999999'"));
  CATCH_CHECK_THROWS_WITH(apply_override(c, "lr", "abc"), Catch::Contains("lr must be a decimal number, got 'abc'"));
  CATCH_CHECK_THROWS_WITH(apply_override(c, "lr", "nan"), Catch::Contains("lr must be a decimal number, got 'nan'"));
  CATCH_CHECK_THROWS_WITH(apply_override(c, "lr", "1e400"), Catch::Contains("lr must be a finite number, got '1e400'"));
  // Decimal as the flags take it (hex was taken), and a number below the normal range is one
  // (1e-320 read as "must be a finite number").
  CATCH_CHECK_THROWS_WITH(apply_override(c, "lr", "0x1p-10"), Catch::Contains("lr must be a decimal number, got '0x1p-10'"));
  apply_override(c, "grad_clip", "1e-320");
  CATCH_CHECK(c.grad_clip > 0);
  CATCH_CHECK(c.grad_clip < 1e-300);
  // One too small for a double reads as 0: grad_clip=1e-400 was "no clipping".
  CATCH_CHECK_THROWS_WITH(apply_override(c, "grad_clip", "1e-400"),
                          "override grad_clip=1e-400: grad_clip must be 0 or a number a double holds (this one reads as "
                          "0), got '1e-400'");
  CATCH_CHECK(c.grad_clip > 0);
  CATCH_CHECK_THROWS_WITH(apply_override(c, "seed", "-1"), Catch::Contains("seed must be a non-negative integer"));
  // Digits past 64 bits in a config (JSON keeps them as a float): "must be an integer, got 1e+20".
  CATCH_CHECK_THROWS_WITH(config_from_json(json::parse(R"({"pp": 99999999999999999999})")),
                          "config key 'pp' must be an integer that fits in 32 bits (this one is past 64 bits), got 1e+20");
  // -0 is 0 here too (it was "must be a non-negative integer"), and past 64 bits is said as a
  // config file says it.
  apply_override(c, "seed", "-00");
  CATCH_CHECK(c.seed == 0);
  CATCH_CHECK_THROWS_WITH(apply_override(c, "seed", "18446744073709551616"),
                          "override seed=18446744073709551616: seed must be a non-negative integer below 2^64 (this one "
                          "is past 64 bits), got '18446744073709551616'");
  CATCH_CHECK_THROWS_WITH(apply_override(c, "seed", "-0x"), Catch::Contains("seed must be a non-negative integer, got '-0x'"));
  apply_override(c, "seed", "18446744073709551615");
  CATCH_CHECK_THROWS_WITH(config_from_json(json::parse(R"({"seed": 18446744073709551616})")),
                          Catch::Contains("config key 'seed' must be a non-negative integer below 2^64 (this one is past "
                                          "64 bits)"));
  // An empty string names no choice (partition= trained on the model's default cut, where
  // --partition '' is refused).
  CATCH_CHECK_THROWS_WITH(apply_override(c, "partition="), "override partition=: partition must not be empty (leave it out for its default)");
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"partition", ""}}),
                          "config key 'partition' must be a non-empty string (leave the key out for its default), got \"\"");
  CATCH_CHECK(c.partition.empty());
  // A batch key's 0 is "not given": given, it ran the default batch (the flags refuse 0).
  CATCH_CHECK_THROWS_WITH(apply_override(c, "num_microbatches=0"),
                          "override num_microbatches=0: num_microbatches must be >= 1 (leave it out to derive it from the "
                          "other batch keys)");
  CATCH_CHECK_THROWS_WITH(apply_override(c, "batch_size", "00"), Catch::Contains("batch_size must be >= 1"));
  // Signed zeros too (they ran the default batch).
  CATCH_CHECK_THROWS_WITH(apply_override(c, "num_microbatches", "-0"), Catch::Contains("num_microbatches must be >= 1"));
  CATCH_CHECK_THROWS_WITH(apply_override(c, "global_batch_size", "+00"), Catch::Contains("global_batch_size must be >= 1"));
  CATCH_CHECK(c.num_microbatches == 16);
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"global_batch_size", 0}}),
                          "config key 'global_batch_size' must be a count >= 1 (leave the key out to derive it from the "
                          "others), got 0");
  CATCH_CHECK_THROWS_WITH(apply_override(c, "ppp", "4"), Catch::Contains("unknown config key 'ppp'"));
  CATCH_CHECK_THROWS_WITH(apply_override(c, "pp4"), Catch::Contains("'pp4' must look like key=value"));
  CATCH_CHECK(c.pp == 4);  // failed overrides change nothing
}

CATCH_TEST_CASE("config_to_json round-trips through config_from_json", "[config]") {
  job_config c;
  c.pp = 2;
  c.dp = 3;
  c.tp = 2;
  c.world_size = 12;
  c.batch_size = 48;
  c.num_microbatches = 6;
  c.microbatch_size = 8;
  c.global_batch_size = 144;
  c.schedule = "interleaved";
  c.chunks = 2;
  c.zero_stage = 1;
  c.precision = "bf16";
  c.partition = "uniform";
  c.layers = 24;
  c.hidden = 1024;
  c.heads = 16;
  c.seq_len = 2048;
  c.vocab = 50257;
  c.steps = 1000;
  c.seed = 18446744073709551615ULL;
  c.lr = 0.1 + 0.2;  // not a short decimal: must survive exactly
  c.warmup_steps = 100;
  c.grad_clip = 0;
  c.weight_decay = 0.01;
  c.min_lr_ratio = 0;
  c.lr_decay_style = "cosine";
  c.adam_beta1 = 0.8;
  c.adam_beta2 = 0.999;
  c.adam_eps = 1e-6;
  c.lr_decay_steps = 800;
  c.notes = {"not serialized"};

  json j = config_to_json(c);
  CATCH_CHECK(j.size() == 31);
  CATCH_CHECK(j["lr_decay_steps"] == 800);
  CATCH_CHECK(j["lr_decay_style"] == "cosine");
  CATCH_CHECK(j["adam_beta2"] == 0.999);
  CATCH_CHECK(j.count("notes") == 0);
  CATCH_CHECK(j["pp"] == 2);
  CATCH_CHECK(j["precision"] == "bf16");

  job_config back = config_from_json(j);
  CATCH_CHECK(config_to_json(back) == j);
  CATCH_CHECK(back.lr == c.lr);
  CATCH_CHECK(back.seed == c.seed);
  CATCH_CHECK(back.vocab == 50257);
  CATCH_CHECK(back.schedule == "interleaved");
  CATCH_CHECK(back.notes.empty());
  CATCH_CHECK(back.partition == "uniform");
  CATCH_CHECK(back.adam_eps == 1e-6);
  CATCH_CHECK(back.min_lr_ratio == 0);
  // The default partition (no value) is left out, so the JSON reads back.
  CATCH_CHECK(config_to_json(job_config{}).count("partition") == 0);
  CATCH_CHECK(config_from_json(config_to_json(job_config{})).partition.empty());
  // Through text too, as a file would be.
  CATCH_CHECK(config_to_json(config_from_json(json::parse(j.dump()))) == j);
  CATCH_CHECK(config_to_json(job_config{}) == config_to_json(config_from_json(config_to_json(job_config{}))));
}

CATCH_TEST_CASE("load_config_file reads a file and names the path on errors", "[config]") {
  std::string good = temp_path("good.json");
  write_file(good, "{\n  // pipeline of 2\n  \"pp\": 2,\n  \"batch_size\": 16,\n  \"num_microbatches\": 4\n}\n");
  job_config c = load_config_file(good);
  CATCH_CHECK(c.pp == 2);
  CATCH_CHECK(c.num_microbatches == 4);
  resolve_and_validate(c);
  CATCH_CHECK(c.microbatch_size == 4);
  std::remove(good.c_str());

  std::string missing = temp_path("does_not_exist.json");
  CATCH_CHECK_THROWS_WITH(load_config_file(missing),
                          Catch::Contains("cannot open config file '" + missing + "'"));
  CATCH_CHECK_THROWS_WITH(load_config_file("/tmp"), "config file '/tmp' is a directory, not a JSON file");

  std::string bad = temp_path("bad.json");
  write_file(bad, "{\n  \"pp\": 2,,\n}\n");
  CATCH_CHECK_THROWS_WITH(load_config_file(bad), Catch::Contains("config file '" + bad + "' is not valid JSON") &&
                                                     Catch::Contains("line 2"));
  std::remove(bad.c_str());

  std::string typo = temp_path("typo.json");
  write_file(typo, "{\"num_microbatch\": 4}");
  CATCH_CHECK_THROWS_WITH(load_config_file(typo), Catch::Contains("config file '" + typo + "'") &&
                                                      Catch::Contains("did you mean 'num_microbatches'"));
  std::remove(typo.c_str());

  // JSON's parser reads 1e-400 as 0 ("grad_clip": 1e-400 trained without clipping): refused by
  // line; the same text in a string or a comment, and a number below the normal range, are not.
  std::string tiny = temp_path("tiny.json");
  write_file(tiny, "{\n  \"schedule\": \"1e-400\", // 1e-400\n  /* 2e-500 */ \"lr\": 1e-320,\n  \"grad_clip\": 1e-400\n}\n");
  CATCH_CHECK_THROWS_WITH(load_config_file(tiny), "config file '" + tiny + "': the number 1e-400 on line 4 is too small for a "
                                                  "double and reads as 0: give 0, or a number a double holds");
  write_file(tiny, "{\"lr\": 1e-320, \"grad_clip\": 0.0}");
  CATCH_CHECK(load_config_file(tiny).lr > 0);
  // One too large for a double failed the parse: it was "not valid JSON".
  write_file(tiny, "{\n  \"schedule\": \"1e400\",\n  \"lr\": -1e400\n}\n");
  CATCH_CHECK_THROWS_WITH(load_config_file(tiny), "config file '" + tiny + "': the number -1e400 on line 3 is beyond "
                                                  "a double's range (-1.8e308 to 1.8e308)");
  write_file(tiny, "{\"lr\": 1e400,}");  // before a syntax error, the number is named
  CATCH_CHECK_THROWS_WITH(load_config_file(tiny), Catch::Contains("the number 1e400 on line 1 is beyond"));
  write_file(tiny, "{\n \"steps\": 2 x,\n \"lr\": 1e400\n}\n");  // after one, the syntax error
  CATCH_CHECK_THROWS_WITH(load_config_file(tiny), Catch::Contains("is not valid JSON"));
  write_file(tiny, "{\"lr\": 1e-3,}");
  CATCH_CHECK_THROWS_WITH(load_config_file(tiny), Catch::Contains("is not valid JSON"));
  std::remove(tiny.c_str());
}

CATCH_TEST_CASE("load_config_file refuses a key given twice, naming it", "[config]") {
  // nlohmann::json keeps the last of two: {"pp":2,"pp":3} was silently pp=3.
  std::string twice = temp_path("twice.json");
  write_file(twice, "{\"pp\": 2, \"batch_size\": 8, \"pp\": 3}");
  CATCH_CHECK_THROWS_WITH(load_config_file(twice),
                          "config file '" + twice + "': key 'pp' is given twice (give each key once)");
  write_file(twice, "{\n  \"num_microbatches\": 4,\n  // again\n  \"num_microbatches\": 4\n}\n");
  CATCH_CHECK_THROWS_WITH(load_config_file(twice), Catch::Contains("key 'num_microbatches' is given twice"));
  // Nested past a bound: its value's print in a message overflowed the stack (80,000 levels).
  write_file(twice, "{\"pp\": " + std::string(80000, '[') + std::string(80000, ']') + "}");
  CATCH_CHECK_THROWS_WITH(load_config_file(twice), "config file '" + twice + "' nests deeper than 100 levels");
  write_file(twice, "{\"pp\": " + std::string(99, '[') + std::string(99, ']') + "}");
  CATCH_CHECK_THROWS_WITH(load_config_file(twice), Catch::Contains("pp"));  // 100 levels: read, and refused by its type
  // Keys differing only in case are different keys (and "PP" an unknown one).
  write_file(twice, "{\"pp\": 2, \"PP\": 3}");
  CATCH_CHECK_THROWS_WITH(load_config_file(twice), Catch::Contains("unknown config key 'PP'"));
  // A file parsed with the check still reads as before.
  write_file(twice, "{\"pp\": 2, \"dp\": 2, \"schedule\": \"gpipe\"}");
  job_config c = load_config_file(twice);
  CATCH_CHECK(c.pp == 2);
  CATCH_CHECK(c.dp == 2);
  CATCH_CHECK(c.schedule == "gpipe");
  std::remove(twice.c_str());
}

CATCH_TEST_CASE("rule: pp, dp, tp >= 1 and world_size = pp*dp*tp", "[config]") {
  job_config c = base();
  c.pp = 2;
  c.dp = 2;
  c.tp = 2;
  c.num_microbatches = 4;
  job_config ok = resolved(c);
  CATCH_CHECK(ok.world_size == 8);  // derived
  c.world_size = 8;
  CATCH_CHECK_NOTHROW(resolved(c));
  c.world_size = 6;
  CATCH_CHECK_THROWS_WITH(resolved(c), "world_size=6 does not equal pp*dp*tp = 2*2*2 = 8");

  job_config z = base();
  z.pp = 0;
  CATCH_CHECK_THROWS_WITH(resolved(z), "pp=0 must be >= 1");
  z = base();
  z.dp = -2;
  CATCH_CHECK_THROWS_WITH(resolved(z), "dp=-2 must be >= 1");
  z = base();
  z.tp = 0;
  CATCH_CHECK_THROWS_WITH(resolved(z), "tp=0 must be >= 1");
  z = base();
  z.world_size = -1;
  CATCH_CHECK_THROWS_WITH(resolved(z), Catch::Contains("world_size=-1 must be >= 0"));
}

CATCH_TEST_CASE("rule: pp > 1 needs num_microbatches or microbatch_size", "[config]") {
  job_config c = base();
  c.pp = 4;
  CATCH_CHECK_THROWS_WITH(resolved(c), "pp=4 needs num_microbatches or microbatch_size");
  c.microbatch_size = 2;
  job_config ok = resolved(c);
  CATCH_CHECK(ok.num_microbatches == 4);
  CATCH_CHECK(ok.batch_size == 8);
}

CATCH_TEST_CASE("rule: num_microbatches wins over microbatch_size", "[config]") {
  job_config c = base();
  c.batch_size = 32;
  c.num_microbatches = 8;
  c.microbatch_size = 5;
  job_config r = resolved(c);
  CATCH_CHECK(r.microbatch_size == 4);
  CATCH_CHECK(r.num_microbatches == 8);
  CATCH_REQUIRE(r.notes.size() == 1);
  CATCH_CHECK_THAT(r.notes[0], Catch::Contains("microbatch_size=5 overridden") &&
                                   Catch::Contains("32/8 = 4"));

  c.microbatch_size = 4;  // agrees: no note
  CATCH_CHECK(resolved(c).notes.empty());

  c.batch_size = 30;
  CATCH_CHECK_THROWS_WITH(resolved(c), "batch_size=30 is not a multiple of num_microbatches=8");

  // Without batch_size both given define it.
  job_config d;
  d.num_microbatches = 4;
  d.microbatch_size = 2;
  d.pp = 2;
  job_config rd = resolved(d);
  CATCH_CHECK(rd.batch_size == 8);
  CATCH_CHECK(rd.global_batch_size == 8);
}

CATCH_TEST_CASE("rule: one of num_microbatches / microbatch_size derives the other from batch_size",
                "[config]") {
  job_config c = base();
  c.pp = 2;
  c.batch_size = 32;
  c.num_microbatches = 8;
  CATCH_CHECK(resolved(c).microbatch_size == 4);
  c.batch_size = 30;
  CATCH_CHECK_THROWS_WITH(resolved(c), "batch_size=30 is not a multiple of num_microbatches=8");
  c.batch_size = 0;
  CATCH_CHECK_THROWS_WITH(resolved(c), Catch::Contains("num_microbatches=8 needs batch_size"));

  job_config m = base();
  m.pp = 2;
  m.batch_size = 32;
  m.microbatch_size = 4;
  CATCH_CHECK(resolved(m).num_microbatches == 8);
  m.batch_size = 30;
  CATCH_CHECK_THROWS_WITH(resolved(m), "batch_size=30 is not a multiple of microbatch_size=4");
  m.batch_size = 0;
  CATCH_CHECK_THROWS_WITH(resolved(m), Catch::Contains("microbatch_size=4 with pp=2 needs batch_size"));
}

CATCH_TEST_CASE("rule: pp == 1 batching defaults to one microbatch", "[config]") {
  job_config c;
  c.batch_size = 16;
  job_config r = resolved(c);
  CATCH_CHECK(r.num_microbatches == 1);
  CATCH_CHECK(r.microbatch_size == 16);
  CATCH_CHECK(r.global_batch_size == 16);
  CATCH_CHECK(r.world_size == 1);

  job_config only_micro;
  only_micro.microbatch_size = 4;
  job_config rm = resolved(only_micro);
  CATCH_CHECK(rm.batch_size == 4);
  CATCH_CHECK(rm.num_microbatches == 1);

  CATCH_CHECK_THROWS_WITH(resolved(job_config{}), Catch::Contains("batch_size=0") &&
                                                       Catch::Contains("give batch_size"));
  job_config negative;
  negative.batch_size = -4;
  CATCH_CHECK_THROWS_WITH(resolved(negative), "batch_size=-4 must be >= 0 (0 = not given)");
  negative = base();
  negative.num_microbatches = -1;
  CATCH_CHECK_THROWS_WITH(resolved(negative), Catch::Contains("num_microbatches=-1 must be >= 0"));
}

CATCH_TEST_CASE("rule: global_batch_size = microbatch_size * num_microbatches * dp", "[config]") {
  job_config c = base();
  c.dp = 2;
  c.batch_size = 16;
  c.num_microbatches = 4;
  CATCH_CHECK(resolved(c).global_batch_size == 32);
  c.global_batch_size = 32;
  CATCH_CHECK_NOTHROW(resolved(c));
  c.global_batch_size = 64;
  CATCH_CHECK_THROWS_WITH(resolved(c),
                          "global_batch_size=64 does not equal microbatch_size*num_microbatches*dp = 4*4*2 = 32");

  // batch_size from global_batch_size / dp.
  job_config g;
  g.dp = 4;
  g.global_batch_size = 32;
  g.num_microbatches = 2;
  job_config rg = resolved(g);
  CATCH_CHECK(rg.batch_size == 8);
  CATCH_CHECK(rg.microbatch_size == 4);
  g.global_batch_size = 30;
  CATCH_CHECK_THROWS_WITH(resolved(g), "global_batch_size=30 is not a multiple of dp=4");
  // A global batch alone is named as given, not as the batch_size no one gave.
  g.global_batch_size = 40;
  g.num_microbatches = 3;
  CATCH_CHECK_THROWS_WITH(resolved(g), "global_batch_size=40 / dp=4 = 10 is not a multiple of num_microbatches=3");
  g.dp = 1;
  g.global_batch_size = 10;
  CATCH_CHECK_THROWS_WITH(resolved(g), "global_batch_size=10 is not a multiple of num_microbatches=3");
}

CATCH_TEST_CASE("rule: zero_stage in 0..3, and 0 or 1 with pipeline parallelism", "[config]") {
  job_config c = base();
  c.zero_stage = 3;
  CATCH_CHECK_NOTHROW(resolved(c));
  c.zero_stage = 4;
  CATCH_CHECK_THROWS_WITH(resolved(c), "zero_stage=4 must be 0, 1, 2 or 3");
  c.zero_stage = -1;
  CATCH_CHECK_THROWS_WITH(resolved(c), Catch::Contains("zero_stage=-1"));

  job_config p = base();
  p.pp = 4;
  p.num_microbatches = 4;
  p.zero_stage = 1;
  CATCH_CHECK_NOTHROW(resolved(p));
  p.zero_stage = 2;
  CATCH_CHECK_THROWS_WITH(resolved(p), "zero_stage=2 is not supported with pp=4: use 0 or 1");
}

CATCH_TEST_CASE("rule: precision is fp32, bf16 or fp16", "[config]") {
  job_config c = base();
  for (const char* ok : {"fp32", "bf16", "fp16"}) {
    c.precision = ok;
    CATCH_CHECK_NOTHROW(resolved(c));
  }
  c.precision = "fp8";
  CATCH_CHECK_THROWS_WITH(resolved(c), "precision='fp8' must be one of fp32, bf16, fp16");
}

CATCH_TEST_CASE("rule: the schedule must accept pp, num_microbatches and chunks", "[config]") {
  job_config c = base();
  c.pp = 4;
  c.num_microbatches = 2;
  CATCH_CHECK_THROWS_WITH(resolved(c), Catch::StartsWith("schedule: ") &&
                                           Catch::Contains("1f1b needs microbatches >= stages") &&
                                           Catch::Contains("stages=4, microbatches=2"));
  c.num_microbatches = 4;
  CATCH_CHECK_NOTHROW(resolved(c));

  c.chunks = 2;  // 1f1b has one chunk per rank
  CATCH_CHECK_THROWS_WITH(resolved(c), Catch::Contains("schedule: 1f1b needs chunks == 1"));
  c.schedule = "interleaved";
  CATCH_CHECK_NOTHROW(resolved(c));
  c.num_microbatches = 6;
  c.batch_size = 12;
  CATCH_CHECK_THROWS_WITH(resolved(c), Catch::Contains("interleaved needs microbatches to be a multiple of stages"));

  job_config u = base();
  u.schedule = "x";
  CATCH_CHECK_THROWS_WITH(resolved(u), Catch::Contains("schedule: unknown schedule 'x'"));
  u.schedule = "gpipe";
  CATCH_CHECK_NOTHROW(resolved(u));
}

CATCH_TEST_CASE("rule: an unknown schedule is named before any other rule", "[config]") {
  // pp=3 with num_microbatches and no batch size breaks a batch rule too; the typo comes first.
  job_config c;
  c.schedule = "zzz";
  c.pp = 3;
  c.num_microbatches = 8;
  CATCH_CHECK_THROWS_WITH(resolved(c), Catch::StartsWith("schedule: unknown schedule 'zzz' (known: ") &&
                                           Catch::Contains("; dynamic policies: "));
  c.pp = 0;
  CATCH_CHECK_THROWS_WITH(resolved(c), Catch::StartsWith("schedule: unknown schedule 'zzz'"));
  job_config p = c;
  CATCH_CHECK_THROWS_WITH(resolve_for_plan(p), Catch::StartsWith("schedule: unknown schedule 'zzz'"));
  // A dynamic policy's name is known.
  c.pp = 3;
  c.schedule = "greedy";
  CATCH_CHECK_THROWS_WITH(resolved(c), Catch::StartsWith("num_microbatches=8 needs batch_size"));
  // A plan read from a file: the schedule name is not the plan's, so it is not checked.
  job_config f = base();
  f.schedule = "zzz";
  CATCH_CHECK_NOTHROW(resolve_and_validate(f, /*plan_from_file=*/true));
}

CATCH_TEST_CASE("resolve_for_plan needs no batch size unless one is given", "[config]") {
  // What `simulate --set pp=3 -M 8` resolves: train's rules ask for a batch size ...
  job_config c;
  c.pp = 3;
  c.num_microbatches = 8;
  CATCH_CHECK_THROWS_WITH(resolved(c),
                          "num_microbatches=8 needs batch_size (or microbatch_size) to derive microbatch_size");
  // ... a plan does not: the microbatch count is all it takes, the batch sizes stay 0.
  job_config p = c;
  resolve_for_plan(p);
  CATCH_CHECK(p.num_microbatches == 8);
  CATCH_CHECK(p.batch_size == 0);
  CATCH_CHECK(p.microbatch_size == 0);
  CATCH_CHECK(p.global_batch_size == 0);
  CATCH_CHECK(p.world_size == 3);
  job_config again = p;
  resolve_for_plan(again);  // idempotent
  CATCH_CHECK(config_to_json(again) == config_to_json(p));

  // pp == 1 without a count: one microbatch, as train's rule for pp == 1.
  job_config one;
  one.schedule = "gpipe";
  resolve_for_plan(one);
  CATCH_CHECK(one.num_microbatches == 1);
  CATCH_CHECK(one.batch_size == 0);
  // pp > 1 without a count: named.
  job_config none;
  none.pp = 3;
  CATCH_CHECK_THROWS_WITH(resolve_for_plan(none),
                          "pp=3 needs num_microbatches (or batch_size with microbatch_size, to derive it)");
  none.num_microbatches = -1;
  CATCH_CHECK_THROWS_WITH(resolve_for_plan(none), Catch::Contains("num_microbatches=-1 must be >= 0"));

  // Given a batch size, the batch rules apply as for train.
  job_config b = c;
  b.batch_size = 12;
  CATCH_CHECK_THROWS_WITH(resolve_for_plan(b), "batch_size=12 is not a multiple of num_microbatches=8");
  b.batch_size = 16;
  resolve_for_plan(b);
  CATCH_CHECK(b.microbatch_size == 2);
  CATCH_CHECK(b.global_batch_size == 16);
  job_config m;
  m.pp = 2;
  m.microbatch_size = 4;  // a size without a batch: train's error
  CATCH_CHECK_THROWS_WITH(resolve_for_plan(m), Catch::StartsWith("microbatch_size=4 with pp=2 needs batch_size"));
  // The other rules still hold, the schedule's included.
  job_config s = c;
  s.num_microbatches = 2;
  CATCH_CHECK_THROWS_WITH(resolve_for_plan(s), Catch::Contains("schedule: 1f1b needs microbatches >= stages"));
  s.num_microbatches = 8;
  s.zero_stage = 2;
  CATCH_CHECK_THROWS_WITH(resolve_for_plan(s), "zero_stage=2 is not supported with pp=3: use 0 or 1");
}

CATCH_TEST_CASE("rule: model sizes", "[config]") {
  job_config c = base();
  c.pp = 4;
  c.chunks = 2;
  c.schedule = "interleaved";
  c.num_microbatches = 4;
  c.layers = 8;
  CATCH_CHECK_NOTHROW(resolved(c));
  c.layers = 6;
  CATCH_CHECK_THROWS_WITH(resolved(c), Catch::Contains("layers=6 cannot be split over pp*chunks = 4*2 = 8"));
  c.model = "my-convnet";  // the layers key is the GPT's: another model counts its own layers
  CATCH_CHECK_NOTHROW(resolved(c));
  c.model = "gpt";
  // The rule is the default partition's (a block per virtual stage); another partition cuts the
  // GPT's embedding, blocks, ln_f and head (6 + 3 layers here), which the run's partition checks.
  c.partition = "uniform";
  CATCH_CHECK_NOTHROW(resolved(c));
  c.partition.clear();

  job_config h = base();
  h.hidden = 250;
  CATCH_CHECK_THROWS_WITH(resolved(h), "hidden=250 is not divisible by heads=4");
  h.hidden = 252;
  CATCH_CHECK_NOTHROW(resolved(h));

  job_config t = base();
  t.tp = 3;
  CATCH_CHECK_THROWS_WITH(resolved(t), "heads=4 is not divisible by tp=3");
  t.tp = 2;
  CATCH_CHECK_NOTHROW(resolved(t));

  for (const char* key : {"layers", "hidden", "heads", "seq_len", "vocab", "chunks"}) {
    job_config z = base();
    apply_override(z, key, "0");
    CATCH_CHECK_THROWS_WITH(resolved(z), std::string(key) + "=0 must be >= 1");
  }
}

CATCH_TEST_CASE("rule: training settings", "[config]") {
  job_config c = base();
  c.steps = 1;
  c.grad_clip = 0;
  c.weight_decay = 0;
  CATCH_CHECK_NOTHROW(resolved(c));

  job_config s = base();
  s.steps = 0;
  CATCH_CHECK_THROWS_WITH(resolved(s), "steps=0 must be >= 1");
  job_config l = base();
  l.lr = 0;
  CATCH_CHECK_THROWS_WITH(resolved(l), Catch::Contains("lr=0 must be"));
  l.lr = -0.5;
  CATCH_CHECK_THROWS_WITH(resolved(l), Catch::Contains("lr=-0.5 must be"));
  job_config g = base();
  g.grad_clip = -0.5;
  CATCH_CHECK_THROWS_WITH(resolved(g), Catch::Contains("grad_clip=-0.5 must be >= 0"));
  job_config w = base();
  w.weight_decay = -0.1;
  CATCH_CHECK_THROWS_WITH(resolved(w), Catch::Contains("weight_decay=-0.1 must be >= 0"));
  // AdamW's settings and the decay's floor, each at its edges.
  job_config edges = base();
  edges.min_lr_ratio = 1;
  edges.adam_beta1 = 0;
  edges.adam_beta2 = 0.999999;
  edges.adam_eps = 1e-30;
  CATCH_CHECK_NOTHROW(resolved(edges));
  for (const double bad : {-0.01, 1.01, std::nan("")}) {
    job_config m = base();
    m.min_lr_ratio = bad;
    CATCH_CHECK_THROWS_WITH(resolved(m), Catch::Contains("min_lr_ratio=" + number_text(bad) + " must be in [0, 1] (a fraction of lr)"));
  }
  for (const double bad : {-0.1, 1.0, HUGE_VAL}) {
    job_config b1 = base(), b2 = base();
    b1.adam_beta1 = bad;
    b2.adam_beta2 = bad;
    CATCH_CHECK_THROWS_WITH(resolved(b1), Catch::Contains("adam_beta1=" + number_text(bad) + " must be in [0, 1)"));
    CATCH_CHECK_THROWS_WITH(resolved(b2), Catch::Contains("adam_beta2=" + number_text(bad) + " must be in [0, 1)"));
  }
  for (const double bad : {0.0, -1e-8, 1e-40, 1e39}) {
    job_config e = base();
    e.adam_eps = bad;
    CATCH_CHECK_THROWS_WITH(resolved(e), Catch::Contains("adam_eps=" + number_text(bad) +
                                                         " must be a number > 0 within a float's normal range"));
  }
  for (const char* style : {"linear", "cosine", "constant"}) {
    job_config d = base();
    d.lr_decay_style = style;
    CATCH_CHECK_NOTHROW(resolved(d));
  }
  job_config d = base();
  d.lr_decay_style = "Cosine";
  CATCH_CHECK_THROWS_WITH(resolved(d), Catch::Contains("lr_decay_style=\"Cosine\" must be linear, cosine or constant"));
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"lr_decay_style", 1}}), Catch::Contains("lr_decay_style"));
  // Megatron's names point to these.
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"min_lr", 1e-5}}),
                          "unknown config key 'min_lr' (the floor is min_lr_ratio, a fraction of lr: Megatron's min_lr is "
                          "lr x min_lr_ratio)");
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"lr_decay_iters", 100}}),
                          "unknown config key 'lr_decay_iters' (Megatron's lr_decay_iters: the key is lr_decay_steps)");
  // Where the decay ends: a step past the warm-up's first full-lr step, or 0 for the last.
  job_config decay = base();
  decay.steps = 20;
  decay.warmup_steps = 3;
  decay.lr_decay_steps = 4;
  CATCH_CHECK_THROWS_WITH(resolved(decay), Catch::Contains("lr_decay_steps=4 leaves no step to decay over after "
                                                           "warmup_steps=3: at least 5"));
  decay.lr_decay_steps = -1;
  CATCH_CHECK_THROWS_WITH(resolved(decay), Catch::Contains("lr_decay_steps=-1 must be >= 0 (0 = the last of steps)"));
  decay.lr_decay_steps = 5;
  CATCH_CHECK(resolved(decay).lr_decay_steps == 5);
  decay.lr_decay_steps = 500;  // past steps: a run that ends mid-decay
  CATCH_CHECK(resolved(decay).lr_decay_steps == 500);
  CATCH_CHECK(config_from_json(json{{"lr_decay_steps", 40}}).lr_decay_steps == 40);
  // A refused number as it reads back: six digits made 1.0000001 read "1", which the rule allows.
  CATCH_CHECK(exact_number_text(1.0000001) == "1.0000001");
  CATCH_CHECK(exact_number_text(0.1 + 0.2) == "0.30000000000000004");
  CATCH_CHECK(exact_number_text(3e-4) == "0.0003");
  CATCH_CHECK(exact_number_text(1e300) == "1e+300");
  CATCH_CHECK(exact_number_text(-HUGE_VAL) == "-inf");
  job_config near = base();
  near.min_lr_ratio = 1.0000001;
  CATCH_CHECK_THROWS_WITH(resolved(near), Catch::Contains("min_lr_ratio=1.0000001 must be in [0, 1]"));
  // Typed as a flag's name, a key is pointed to.
  CATCH_CHECK_THROWS_WITH(config_from_json(json{{"adam-beta1", 0.8}}),
                          "unknown config key 'adam-beta1' (a flag's name: its key is 'adam_beta1')");
  job_config u = base();
  u.warmup_steps = -1;
  CATCH_CHECK_THROWS_WITH(resolved(u), Catch::Contains("warmup_steps=-1 must be >= 0"));
  u.warmup_steps = 20;  // steps = 10: allowed, with a note
  job_config ru = resolved(u);
  CATCH_REQUIRE(ru.notes.size() == 1);
  CATCH_CHECK_THAT(ru.notes[0], Catch::Contains("warmup_steps=20 exceeds steps=10"));
}

CATCH_TEST_CASE("resolve_and_validate is idempotent", "[config]") {
  job_config c = base();
  c.pp = 2;
  c.dp = 2;
  c.batch_size = 32;
  c.num_microbatches = 8;
  c.microbatch_size = 3;
  c.warmup_steps = 50;
  resolve_and_validate(c);
  json once = config_to_json(c);
  auto notes = c.notes;
  CATCH_CHECK(notes.size() == 2);
  resolve_and_validate(c);
  CATCH_CHECK(config_to_json(c) == once);
  CATCH_CHECK(c.notes == notes);
  // And the resolved config survives a round trip into a still-valid config.
  job_config back = config_from_json(once);
  CATCH_CHECK_NOTHROW(resolve_and_validate(back));
  CATCH_CHECK(config_to_json(back) == once);
}
