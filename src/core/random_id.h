#pragma once
// Fresh identifiers for what the server hands out (completions, tool calls, requests): a prefix
// and 24 hex digits from a per-thread generator seeded by the OS.

#include <string>

namespace tf {

// "cmpl-3f2a..." for prefix "cmpl-".
std::string random_id(const std::string& prefix);

}  // namespace tf
