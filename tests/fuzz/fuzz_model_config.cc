// Fuzz target: TF Serving's model config text format (--model_config_file, and the body of
// POST /v1/admin/reload), its monitoring config (--monitoring_config_file), batching
// parameters (--batching_parameters_file) and SSL config (--ssl_config_file) from the same bytes.
// Any input must end in a config or an Error, never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "serving/models/server_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto config = tf::parse_model_server_config(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    (void)tf::model_entries(config);
  } catch (const tf::Error&) {
  }
  try {
    (void)tf::parse_batching_parameters(std::string_view(reinterpret_cast<const char*>(data), size),
                                        "fuzz");
  } catch (const tf::Error&) {
  }
  try {
    (void)tf::parse_ssl_config(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const tf::Error&) {
  }
  try {
    (void)tf::parse_prometheus_path(std::string_view(reinterpret_cast<const char*>(data), size),
                                    "fuzz");
  } catch (const tf::Error&) {
  }
  return 0;
}
