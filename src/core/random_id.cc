#include "core/random_id.h"

#include <fmt/format.h>

#include <cstdint>
#include <random>

namespace tf {

std::string random_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

}  // namespace tf
