#include "core/sha256.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <charconv>

#include "core/error.h"

namespace tf {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1)
    fail(ErrorKind::kInternal, "SHA-256: libcrypto could not start a digest");
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

Sha256& Sha256::update(const void* data, size_t bytes) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, bytes);
  return *this;
}

Sha256& Sha256::update_u64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return update(b, sizeof b);
}

Sha256Digest Sha256::digest() {
  Sha256Digest out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &len);
  return out;
}

Sha256Digest sha256(const void* data, size_t bytes) {
  Sha256Digest out{};
  unsigned int len = 0;
  EVP_Digest(data, bytes, out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

Sha256Digest sha256(std::string_view data) {
  return sha256(data.data(), data.size());
}

std::string hex(const Sha256Digest& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < d.size(); ++i) {
    out[2 * i] = kDigits[d[i] >> 4];
    out[2 * i + 1] = kDigits[d[i] & 15];
  }
  return out;
}

std::optional<Sha256Digest> parse_hex_digest(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  Sha256Digest out{};
  for (size_t i = 0; i < 32; ++i) {
    unsigned v = 0;
    const auto r = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, v, 16);
    if (r.ec != std::errc() || r.ptr != hex.data() + 2 * i + 2) return std::nullopt;
    out[i] = static_cast<uint8_t>(v);
  }
  return out;
}

Sha256Digest random_secret() {
  Sha256Digest out{};
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1)
    fail(ErrorKind::kInternal, "RAND_bytes failed: no randomness for a secret");
  return out;
}

}  // namespace tf
