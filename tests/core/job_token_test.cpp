// Job token: only the holder of the token can answer a challenge, for its own identity, once
// per challenge; the token never shows up in errors or logs.
#include <catch2/catch.hpp>

#include <set>

#include "core/job_token.hpp"

using namespace actorpipe;
using Catch::Contains;

CATCH_TEST_CASE("generated tokens are 64 hex characters and unique", "[security][token]") {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    std::string t = generate_job_token();
    CATCH_CHECK(t.size() == 64);
    CATCH_CHECK(t.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(t);
  }
  CATCH_CHECK(seen.size() == 200);
}

CATCH_TEST_CASE("an answer verifies only for the same token, challenge and joiner", "[security][token]") {
  const std::string token = generate_job_token();
  const auto challenge = make_challenge();
  const auto answer = answer_challenge(token, challenge, "host-a:1234");
  CATCH_CHECK(answer.size() == 32);
  CATCH_CHECK(verify_answer(token, challenge, "host-a:1234", answer));
  CATCH_CHECK_FALSE(verify_answer(generate_job_token(), challenge, "host-a:1234", answer));  // wrong token
  CATCH_CHECK_FALSE(verify_answer(token, make_challenge(), "host-a:1234", answer));         // replayed answer
  CATCH_CHECK_FALSE(verify_answer(token, challenge, "host-b:1234", answer));                // other identity
  auto tampered = answer;
  tampered[7] ^= 1;
  CATCH_CHECK_FALSE(verify_answer(token, challenge, "host-a:1234", tampered));
  CATCH_CHECK_FALSE(verify_answer(token, challenge, "host-a:1234", {}));  // no answer at all
  CATCH_CHECK_FALSE(verify_answer(token, challenge, "host-a:1234", std::vector<std::uint8_t>(answer.begin(), answer.end() - 1)));
  auto short_challenge = challenge;
  short_challenge.pop_back();
  CATCH_CHECK_FALSE(verify_answer(token, short_challenge, "host-a:1234", answer));
  // The joiner is length-prefixed: moving a byte across the boundary changes the answer.
  CATCH_CHECK(answer_challenge(token, challenge, "ab") != answer_challenge(token, challenge, "a"));
  // Fixed inputs give a fixed answer (the protocol is deterministic given the challenge).
  CATCH_CHECK(answer_challenge(token, challenge, "x") == answer_challenge(token, challenge, "x"));
}

CATCH_TEST_CASE("weak tokens are refused without echoing them", "[security][token]") {
  const std::string weak = "hunter2";
  try {
    check_job_token(weak);
    CATCH_FAIL("a 7-character token was accepted");
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    CATCH_CHECK(msg == "ACTORPIPE_JOB_TOKEN must be at least 16 characters (it has 7)");
    CATCH_CHECK(msg.find(weak) == std::string::npos);
  }
  CATCH_CHECK_THROWS_WITH(answer_challenge(weak, make_challenge(), "x"), Contains("at least 16 characters"));
  const std::string token = generate_job_token();
  CATCH_CHECK(redact_job_token(token) == "<job token, 64 characters>");
  CATCH_CHECK(redact_job_token(token).find(token.substr(0, 8)) == std::string::npos);
}
