#pragma once
// The models a server runs, as TF Serving's `--model_config_file` gives them (protobuf text
// format of tensorflow.serving.ModelServerConfig, parsed by protobuf's TextFormat against
// proto/tensorflow_serving/config/model_server_config.proto) or as the `--model NAME=PATH`
// shorthand. Parsing and validation happen before anything is applied: a bad file changes
// nothing and its error names the line and column, or the model and field.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensorflow_serving/config/model_server_config.pb.h"
#include "tensorflow_serving/config/monitoring_config.pb.h"
#include "tensorflow_serving/config/ssl_config.pb.h"
#include "tensorflow_serving/servables/tensorflow/session_bundle_config.pb.h"

namespace tf {

namespace tfs = tensorflow::serving;

// One model as the registry manages it. unversioned: base_path is itself the model (the
// shorthand for a plain model directory or file), served as version 1.
struct ModelEntryConfig {
  tfs::ModelConfig config;
  bool unversioned = false;
};

// Parses the text format (source names the file in errors: "models.config:3:7: ..."), then
// validates. Throws Error (kInvalidArgument) on the first problem.
tfs::ModelServerConfig parse_model_server_config(std::string_view text, const std::string& source);

// TF Serving's --monitoring_config_file (text MonitoringConfig): the path its Prometheus text is
// served at, "" when prometheus_config is not enabled; TF Serving's default path when the file
// enables it without one. Throws (with the file's line and column) on a malformed file or a
// path that does not start with '/'.
std::string load_prometheus_path(const std::string& path);
// The same from the file's text (source names it in errors).
std::string parse_prometheus_path(std::string_view text, const std::string& source);
// Reads and parses a file; a missing or unreadable file is an Error too.
tfs::ModelServerConfig load_model_server_config(const std::string& path);

// TF Serving's --batching_parameters_file (text BatchingParameters) as tokenflow's engine takes
// it: each field mapped onto an engine setting, or (the padding ones, which a continuous batch
// never needs) checked as TF Serving checks them and noted. Unset fields leave tokenflow's
// settings alone.
struct BatchingSettings {
  std::optional<int64_t> max_num_seqs;          // max_batch_size (max_execution_batch_size
                                                // when enable_large_batch_splitting)
  std::optional<int64_t> batch_timeout_micros;  // batch_timeout_micros
  std::optional<int64_t> max_enqueued_batches;  // x the batch size: the waiting requests
  std::optional<int64_t> threads;               // num_batch_threads: compute threads
  std::vector<std::string> notes;               // fields taken without effect, and why
};
// Throws Error naming the file, the field and (for text-format errors) the line and column.
BatchingSettings parse_batching_parameters(std::string_view text, const std::string& source);
BatchingSettings load_batching_parameters(const std::string& path);

// TF Serving's --ssl_config_file (text SSLConfig: PEM key, certificate and client CA inline),
// checked: a key and a certificate that parse as PEM, client_verify only with a custom_ca.
tfs::SSLConfig parse_ssl_config(std::string_view text, const std::string& source);
tfs::SSLConfig load_ssl_config(const std::string& path);

// What the text format cannot check: a model_config_list (custom_model_config is refused), names
// unique and usable in every API (non-empty, no ':' or '@', no spaces), base_path present,
// version policy and labels well-formed (labels are word characters, as TF Serving's REST paths
// take them), traffic-split routes with a target, weights > 0 and known labels.
void validate_model_server_config(const tfs::ModelServerConfig& config);

// The entries of a validated config, in file order.
std::vector<ModelEntryConfig> model_entries(const tfs::ModelServerConfig& config);

// `--model` values: "NAME=PATH" or "PATH" (named by --served-model-name when given, else after
// the directory). A PATH whose children are integer-named directories is a versioned base path
// (latest version served); any other PATH is one model, version 1.
std::vector<ModelEntryConfig> model_entries_from_flags(const std::vector<std::string>& models,
                                                       const std::vector<std::string>& names);

// model_platform values tokenflow runs: "", "tokenflow" and "tensorflow" (TF Serving's, so that a
// model_config_list written for it serves unchanged; the version directories hold any model
// format tokenflow loads).
bool platform_supported(const std::string& platform);

// Integer-named subdirectories of dir, ascending (the versions of a base path).
std::vector<int64_t> list_versions(const std::string& dir);

}  // namespace tf
