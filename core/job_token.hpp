// The job token: how a process proves it belongs to the job before the supervisor acts on
// anything it sends. The token itself never crosses the network and never appears in logs:
// the supervisor sends a fresh random challenge, the joiner answers with
// HMAC-SHA256(token, "actorpipe-join-v1" | challenge | joiner id), and the supervisor checks
// the answer in constant time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actorpipe {

// 32 random bytes from the OS's CSPRNG (OpenSSL RAND_bytes), as 64 hex characters.
std::string generate_job_token();

// Throws std::invalid_argument if the token is too weak to use (fewer than 16 characters);
// the message gives the length, never the token.
void check_job_token(const std::string& token);

// 32 random bytes, new for every join attempt.
std::vector<std::uint8_t> make_challenge();

// The joiner's answer (32 bytes). `joiner` names the process (e.g. "host:pid"), so an answer
// cannot be replayed for another identity.
std::vector<std::uint8_t> answer_challenge(const std::string& token, const std::vector<std::uint8_t>& challenge,
                                           const std::string& joiner);

// True when `answer` is the answer for (token, challenge, joiner); constant-time compare.
bool verify_answer(const std::string& token, const std::vector<std::uint8_t>& challenge, const std::string& joiner,
                   const std::vector<std::uint8_t>& answer);

// What logs show instead of a token: "<job token, 64 characters>".
std::string redact_job_token(const std::string& token);

}  // namespace actorpipe
