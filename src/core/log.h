#pragma once
// Logging goes to stderr through spdlog so that stdout stays clean for generated text.

#include <spdlog/spdlog.h>

#include <string_view>

namespace tf {

// Sets the global log level from a name: trace, debug, info, warn, error, off.
void set_log_level(std::string_view level);

namespace log {
using spdlog::debug;
using spdlog::error;
using spdlog::info;
using spdlog::warn;
}  // namespace log

}  // namespace tf
