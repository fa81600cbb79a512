#include "serving/models/server_config.h"

#include <fmt/format.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "chat/chat_format.h"
#include "core/error.h"
#include "serving/models/generate_settings.h"
#include "serving/models/served_model.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

// Collects the parser's first error with its position (the parser reports 0-based lines and
// columns).
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstError(std::string source) : source_(std::move(source)) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (message_.empty())
      message_ = fmt::format("{}:{}:{}: {}", source_, line + 1, column + 1, message);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& message() const { return message_; }

 private:
  std::string source_;
  std::string message_;
};

bool is_word(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

bool platform_supported(const std::string& platform) {
  return platform.empty() || platform == "tokenflow" || platform == "tensorflow";
}

namespace {

// A text-format message of type M (`what` names it in errors), or an Error with the place of
// the first mistake.
template <class M>
M parse_text_message(std::string_view text, const std::string& source, const char* what) {
  M message;
  google::protobuf::TextFormat::Parser parser;
  FirstError errors(source);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &message)) {
    fail(ErrorKind::kInvalidArgument, "{}",
         errors.message().empty() ? fmt::format("{}: not a {}", source, what) : errors.message());
  }
  return message;
}

// The whole of a configuration file (`what` names it in errors).
std::string read_config_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kNotFound, "cannot read {} file {}", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(ErrorKind::kInvalidArgument, "cannot read {} file {}", what, path);
  return ss.str();
}

}  // namespace

tfs::ModelServerConfig parse_model_server_config(std::string_view text, const std::string& source) {
  auto config = parse_text_message<tfs::ModelServerConfig>(text, source, "ModelServerConfig");
  validate_model_server_config(config);
  return config;
}

std::string parse_prometheus_path(std::string_view text, const std::string& source) {
  const auto config = parse_text_message<tfs::MonitoringConfig>(text, source, "MonitoringConfig");
  if (!config.prometheus_config().enable()) return "";
  const std::string& p = config.prometheus_config().path();
  if (p.empty()) return "/monitoring/prometheus/metrics";
  if (p[0] != '/')
    fail(ErrorKind::kInvalidArgument, "{}: path must start with '/', got '{}'", source, p);
  return p;
}

std::string load_prometheus_path(const std::string& path) {
  return parse_prometheus_path(read_config_file(path, "monitoring config"), path);
}

tfs::ModelServerConfig load_model_server_config(const std::string& path) {
  return parse_model_server_config(read_config_file(path, "model config"), path);
}

BatchingSettings parse_batching_parameters(std::string_view text, const std::string& source) {
  const auto p = parse_text_message<tfs::BatchingParameters>(text, source, "BatchingParameters");
  BatchingSettings out;
  auto positive = [&](const google::protobuf::Int64Value& v, bool has, const char* name,
                      int64_t least) -> std::optional<int64_t> {
    if (!has) return std::nullopt;
    if (v.value() < least)
      fail(ErrorKind::kInvalidArgument, "{}: {} must be >= {}, got {}", source, name, least,
           v.value());
    return v.value();
  };
  const auto max_batch = positive(p.max_batch_size(), p.has_max_batch_size(), "max_batch_size", 1);
  const auto max_execution =
      positive(p.max_execution_batch_size(), p.has_max_execution_batch_size(),
               "max_execution_batch_size", 1);
  out.batch_timeout_micros =
      positive(p.batch_timeout_micros(), p.has_batch_timeout_micros(), "batch_timeout_micros", 0);
  out.max_enqueued_batches =
      positive(p.max_enqueued_batches(), p.has_max_enqueued_batches(), "max_enqueued_batches", 1);
  out.threads = positive(p.num_batch_threads(), p.has_num_batch_threads(), "num_batch_threads", 1);
  if (out.threads && *out.threads > 1024)
    fail(ErrorKind::kInvalidArgument, "{}: num_batch_threads must be at most 1024, got {}", source,
         *out.threads);
  // A batch runs at most this many rows: with large batch splitting, the execution size.
  out.max_num_seqs = p.enable_large_batch_splitting() && max_execution ? max_execution : max_batch;
  if (p.enable_large_batch_splitting())
    out.notes.push_back(
        "enable_large_batch_splitting: every request's rows are sequences of their own, so a "
        "large request is always spread over steps");
  if (!p.allowed_batch_sizes().empty()) {
    // TF Serving's checks: increasing, and the last is the largest batch.
    int64_t last = 0;
    for (int64_t size : p.allowed_batch_sizes()) {
      if (size <= last)
        fail(ErrorKind::kInvalidArgument,
             "{}: allowed_batch_sizes entries must be monotonically increasing", source);
      last = size;
    }
    if (out.max_num_seqs && last != *out.max_num_seqs)
      fail(ErrorKind::kInvalidArgument,
           "{}: the final entry in allowed_batch_sizes ({}) must equal {} ({})", source, last,
           p.enable_large_batch_splitting() && max_execution ? "max_execution_batch_size"
                                                             : "max_batch_size",
           *out.max_num_seqs);
    out.notes.push_back(
        "allowed_batch_sizes: a continuous batch computes its sequences without padding, so "
        "batches are not padded up to these sizes");
  }
  if (p.pad_variable_length_inputs())
    out.notes.push_back(
        "pad_variable_length_inputs: rows of any length are taken without padding anyway");
  if (p.has_thread_pool_name())
    out.notes.push_back("thread_pool_name: each model has a compute pool of its own");
  return out;
}

tfs::SSLConfig parse_ssl_config(std::string_view text, const std::string& source) {
  auto c = parse_text_message<tfs::SSLConfig>(text, source, "SSLConfig");
  auto pem = [&](const std::string& value, const char* field, const char* kind) {
    if (value.empty())
      fail(ErrorKind::kInvalidArgument, "{}: {} is required (the PEM text itself)", source, field);
    if (value.find("-----BEGIN ") == std::string::npos ||
        value.find(fmt::format(" {}-----", kind)) == std::string::npos)
      fail(ErrorKind::kInvalidArgument,
           "{}: {} must hold PEM text ('-----BEGIN ...{}-----'), not a file name", source, field,
           kind);
  };
  pem(c.server_key(), "server_key", "PRIVATE KEY");
  pem(c.server_cert(), "server_cert", "CERTIFICATE");
  if (!c.custom_ca().empty()) pem(c.custom_ca(), "custom_ca", "CERTIFICATE");
  if (c.client_verify() && c.custom_ca().empty())
    fail(ErrorKind::kInvalidArgument,
         "{}: client_verify needs custom_ca (the authorities client certificates are verified "
         "against)",
         source);
  return c;
}

tfs::SSLConfig load_ssl_config(const std::string& path) {
  return parse_ssl_config(read_config_file(path, "SSL config"), path);
}

BatchingSettings load_batching_parameters(const std::string& path) {
  return parse_batching_parameters(read_config_file(path, "batching parameters"), path);
}

void validate_model_server_config(const tfs::ModelServerConfig& config) {
  if (config.has_custom_model_config()) {
    fail(ErrorKind::kInvalidArgument,
         "custom_model_config is not supported: give a model_config_list");
  }
  std::set<std::string> names, adapters;
  for (const auto& m : config.model_config_list().config()) {
    const std::string& name = m.name();
    if (name.empty()) fail(ErrorKind::kInvalidArgument, "a model config has no name");
    for (char c : name) {
      if (c == ':' || c == '@' || std::isspace(static_cast<unsigned char>(c)) ||
          static_cast<unsigned char>(c) < 0x20) {
        fail(ErrorKind::kInvalidArgument,
             "model name '{}' may not contain ':', '@' or white space (they address versions "
             "and labels)",
             name);
      }
    }
    if (!names.insert(name).second)
      fail(ErrorKind::kInvalidArgument, "model '{}' is configured twice", name);
    if (m.base_path().empty())
      fail(ErrorKind::kInvalidArgument, "model '{}' has no base_path", name);
    const auto& policy = m.model_version_policy();
    if (policy.has_specific() && policy.specific().versions().empty()) {
      fail(ErrorKind::kInvalidArgument,
           "model '{}': model_version_policy specific lists no versions", name);
    }
    if (policy.has_specific()) {
      for (int64_t v : policy.specific().versions())
        if (v < 0) fail(ErrorKind::kInvalidArgument, "model '{}': version {} is negative", name, v);
    }
    for (const auto& [label, version] : m.version_labels()) {
      if (!is_word(label)) {
        fail(ErrorKind::kInvalidArgument, "model '{}': label '{}' must be letters, digits and '_'",
             name, label);
      }
      if (version < 0) {
        fail(ErrorKind::kInvalidArgument, "model '{}': label '{}' names version {}", name, label,
             version);
      }
    }
    for (const auto& l : m.lora()) {
      if (l.name().empty() || l.path().empty())
        fail(ErrorKind::kInvalidArgument, "model '{}': a lora block needs a name and a path", name);
      if (!adapters.insert(l.name()).second)
        fail(ErrorKind::kInvalidArgument, "LoRA adapter '{}' is configured twice", l.name());
    }
    if (m.has_generate_signature()) validate_signature_config(m.generate_signature(), name);
    if (m.max_batch_size() < 0 || m.batch_timeout_micros() < 0)
      fail(ErrorKind::kInvalidArgument,
           "model '{}': max_batch_size and batch_timeout_micros must be >= 0 (0: the server's)",
           name);
    if (m.num_speculative_tokens() < 0 || m.num_speculative_tokens() > 16)
      fail(ErrorKind::kInvalidArgument,
           "model '{}': num_speculative_tokens must be in 0..16 (0: the server's), not {}", name,
           m.num_speculative_tokens());
    if (!m.speculative().empty()) {
      try {
        EngineConfig probe;
        set_speculative(probe, m.speculative());
      } catch (const Error& e) {
        fail(ErrorKind::kInvalidArgument, "model '{}': {}", name, e.what());
      }
    }
    try {
      if (!m.chat_template().empty()) (void)chat_template_from_spec(m.chat_template());
      if (!m.chat_template_kwargs().empty())
        (void)chat_template_kwargs_from_text(m.chat_template_kwargs(), "chat_template_kwargs");
    } catch (const Error& e) {
      fail(ErrorKind::kInvalidArgument, "model '{}': {}", name, e.what());
    }
    if (m.has_traffic_split()) {
      const auto& split = m.traffic_split();
      if (split.route().empty())
        fail(ErrorKind::kInvalidArgument, "model '{}': traffic_split has no route", name);
      for (const auto& r : split.route()) {
        if (r.target_case() == tfs::TrafficSplit::Route::TARGET_NOT_SET) {
          fail(ErrorKind::kInvalidArgument,
               "model '{}': a traffic_split route names neither a label nor a version", name);
        }
        if (r.weight() == 0) {
          fail(ErrorKind::kInvalidArgument, "model '{}': traffic_split route weights must be > 0",
               name);
        }
        if (r.has_label() && !m.version_labels().contains(r.label())) {
          fail(ErrorKind::kInvalidArgument,
               "model '{}': traffic_split routes to label '{}', which version_labels does not "
               "define",
               name, r.label());
        }
      }
    }
  }
}

std::vector<ModelEntryConfig> model_entries(const tfs::ModelServerConfig& config) {
  std::vector<ModelEntryConfig> out;
  for (const auto& m : config.model_config_list().config()) out.push_back({m, false});
  return out;
}

std::vector<int64_t> list_versions(const std::string& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    int64_t v = 0;
    const auto r = std::from_chars(n.data(), n.data() + n.size(), v);
    if (r.ec == std::errc() && r.ptr == n.data() + n.size() && v >= 0 && e.is_directory(ec))
      out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ModelEntryConfig> model_entries_from_flags(const std::vector<std::string>& models,
                                                       const std::vector<std::string>& names) {
  if (!names.empty() && names.size() != models.size())
    fail(ErrorKind::kInvalidArgument, "give one --served-model-name per --model");
  tfs::ModelServerConfig config;
  std::vector<bool> unversioned;
  for (size_t i = 0; i < models.size(); ++i) {
    std::string name, path = models[i];
    // NAME=PATH, unless the whole value is an existing path (which may contain '=').
    if (const size_t eq = path.find('='); eq != std::string::npos && !fs::exists(path)) {
      name = path.substr(0, eq);
      path = path.substr(eq + 1);
    }
    if (!names.empty()) name = names[i];
    if (name.empty()) name = default_served_name(path);
    auto* m = config.mutable_model_config_list()->add_config();
    m->set_name(name);
    m->set_base_path(path);
    unversioned.push_back(list_versions(path).empty());
  }
  validate_model_server_config(config);
  std::vector<ModelEntryConfig> out = model_entries(config);
  for (size_t i = 0; i < out.size(); ++i) out[i].unversioned = unversioned[i];
  return out;
}

}  // namespace tf
