#pragma once
// SHA-256 and secrets (OpenSSL's libcrypto): API keys' digests, the keys of the KV cache's blocks
// on disk (which must not collide however many blocks a directory holds and whoever picks the
// tokens), and the secrets that key tenants' prefix-cache salts.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tf {

using Sha256Digest = std::array<uint8_t, 32>;

// Feeds bytes in pieces; digest() ends it (the object may not be fed after).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  Sha256& update(const void* data, size_t bytes);
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
  // A little-endian 64-bit integer.
  Sha256& update_u64(uint64_t v);
  Sha256Digest digest();

 private:
  void* ctx_;  // EVP_MD_CTX
};

Sha256Digest sha256(std::string_view data);
Sha256Digest sha256(const void* data, size_t bytes);
// Lower-case hex, 64 digits; and back (64 hex digits, else nullopt).
std::string hex(const Sha256Digest& d);
std::optional<Sha256Digest> parse_hex_digest(std::string_view hex);
// 32 bytes from OpenSSL's RAND_bytes.
Sha256Digest random_secret();

}  // namespace tf
