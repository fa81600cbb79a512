#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace tf {

void set_log_level(std::string_view level) {
  static const bool initialized = [] {
    auto logger = spdlog::stderr_color_mt("tokenflow");
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    spdlog::set_default_logger(logger);
    return true;
  }();
  (void)initialized;
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") fail("unknown log level '{}'", level);
  spdlog::set_level(parsed);
}

}  // namespace tf
