#include "engine/memory_budget.h"

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace tf {
namespace {

int64_t available_memory() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) fail("cannot read /proc/meminfo for a fractional memory budget; give bytes");
  char line[256];
  long long kb = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  }
  std::fclose(f);
  if (kb < 0) fail("no MemAvailable in /proc/meminfo; give the budget in bytes");
  return static_cast<int64_t>(kb) * 1024;
}

}  // namespace

int64_t parse_memory_budget(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(value > 0))
    fail("memory budget '{}' is not a positive number", text);
  const std::string unit(end);
  double bytes = 0;
  if (unit.empty() && value < 1.0) {
    bytes = value * static_cast<double>(available_memory());
  } else if (unit.empty() || unit == "B") {
    bytes = value;
  } else if (unit == "KiB" || unit == "K") {
    bytes = value * 1024;
  } else if (unit == "MiB" || unit == "M") {
    bytes = value * (1 << 20);
  } else if (unit == "GiB" || unit == "G") {
    bytes = value * (1ll << 30);
  } else if (unit == "KB") {
    bytes = value * 1e3;
  } else if (unit == "MB") {
    bytes = value * 1e6;
  } else if (unit == "GB") {
    bytes = value * 1e9;
  } else {
    fail(
        "memory budget '{}': unknown unit '{}' (B, KiB, MiB, GiB, KB, MB, GB, or a fraction below "
        "1)",
        text, unit);
  }
  if (bytes < (1 << 20)) fail("memory budget '{}' is below 1 MiB", text);
  if (bytes > 1e15) fail("memory budget '{}' is implausibly large", text);
  return static_cast<int64_t>(bytes);
}

}  // namespace tf
