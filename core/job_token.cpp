// Job token: generation, challenge and HMAC answer (OpenSSL).
#include "core/job_token.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>

#include "core/wire_bytes.hpp"

namespace actorpipe {
namespace {

constexpr char kDomain[] = "actorpipe-join-v1";

std::vector<std::uint8_t> random_bytes(std::size_t n) {
  std::vector<std::uint8_t> out(n);
  if (RAND_bytes(out.data(), static_cast<int>(n)) != 1) throw std::runtime_error("job token: the OS random source failed");
  return out;
}

}  // namespace

std::string generate_job_token() {
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (std::uint8_t b : random_bytes(32)) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  return token;
}

void check_job_token(const std::string& token) {
  if (token.size() < 16)
    throw std::invalid_argument("ACTORPIPE_JOB_TOKEN must be at least 16 characters (it has " +
                                std::to_string(token.size()) + ")");
}

std::vector<std::uint8_t> make_challenge() { return random_bytes(32); }

std::vector<std::uint8_t> answer_challenge(const std::string& token, const std::vector<std::uint8_t>& challenge,
                                           const std::string& joiner) {
  check_job_token(token);
  if (challenge.size() != 32)
    throw std::invalid_argument("job token: challenge must be 32 bytes, got " + std::to_string(challenge.size()));
  // Length-prefix the joiner so ("ab", "c...") and ("a", "bc...") can never collide.
  std::vector<std::uint8_t> message(kDomain, kDomain + sizeof kDomain - 1);
  message.insert(message.end(), challenge.begin(), challenge.end());
  wire::put_u32(message, static_cast<std::uint32_t>(joiner.size()));
  message.insert(message.end(), joiner.begin(), joiner.end());
  std::vector<std::uint8_t> mac(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), message.data(), message.size(), mac.data(), &len))
    throw std::runtime_error("job token: HMAC-SHA256 failed");
  mac.resize(len);
  return mac;
}

bool verify_answer(const std::string& token, const std::vector<std::uint8_t>& challenge, const std::string& joiner,
                   const std::vector<std::uint8_t>& answer) {
  if (challenge.size() != 32) return false;
  const std::vector<std::uint8_t> expected = answer_challenge(token, challenge, joiner);
  return answer.size() == expected.size() && CRYPTO_memcmp(answer.data(), expected.data(), expected.size()) == 0;
}

std::string redact_job_token(const std::string& token) {
  return "<job token, " + std::to_string(token.size()) + " characters>";
}

}  // namespace actorpipe
