#pragma once

#include <cstdint>
#include <string>

namespace tf {

// "536870912", "512MiB", "2GiB", "1.5GB", or a fraction of the memory available now ("0.3" of
// MemAvailable). Throws Error on anything else or on a budget below one MiB.
int64_t parse_memory_budget(const std::string& text);

}  // namespace tf
