#include "serving/core/api_common.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cmath>
#include <ctime>
#include <random>

#include "core/json.h"
#include "core/log.h"
#include "serving/core/auth.h"
#include "serving/core/metrics.h"
#include "serving/core/status_codes.h"

namespace tf {

const char* request_task(std::string_view path) {
  if (path == "/v1/embeddings" || path == "/api/embed" || path == "/api/embeddings") return "embed";
  if (path == "/v1/rerank" || path == "/rerank" || path == "/v2/rerank" || path == "/score" ||
      path == "/v1/score")
    return "score";
  if (path == "/classify" || path == "/v1/classify") return "classify";
  if (path.starts_with("/v1/admin") || path == "/metrics" || path.starts_with("/health") ||
      path == "/v1/models" || path.starts_with("/v1/models/") || path == "/tokenize" ||
      path == "/v1/tokenize" || path == "/detokenize" || path == "/v1/detokenize")
    return "other";
  return "generate";
}

int http_status_of(const std::exception& e) {
  if (const auto* h = dynamic_cast<const HttpError*>(&e)) return h->status();
  // The safety net under every field check: a JSON value of the wrong type read somewhere
  // is the client's body, not our bug.
  if (dynamic_cast<const nlohmann::json::type_error*>(&e) != nullptr) return 400;
  if (const auto* err = dynamic_cast<const Error*>(&e)) {
    switch (err->kind()) {
      case ErrorKind::kInvalidArgument:
      case ErrorKind::kUnsupported:
      case ErrorKind::kResourceExhausted:  // too large for a limit: retrying will not help
        return 400;
      case ErrorKind::kNotFound:
        return 404;
      case ErrorKind::kUnavailable:
        return 503;
      case ErrorKind::kCancelled:  // nobody reads the answer
        return 499;
      case ErrorKind::kDeadlineExceeded:
        return 504;
      case ErrorKind::kInternal:
        return 500;
    }
  }
  return 500;
}

namespace {

const char* error_type(int status) {
  switch (status) {
    case 400:
    case 404:
    case 413:
    case 422:
    case 431:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return "server_error";
  }
}

const char* default_code(int status) {
  switch (status) {
    case 400:
      return "invalid_parameter";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "request_too_large";
    case 431:
      return "headers_too_large";
    case 429:
      return "rate_limit_exceeded";
    case 503:
      return "server_overloaded";
    case 504:
      return "timeout";
    default:
      return "internal_error";
  }
}

}  // namespace

std::string openai_error_body(int status, const std::string& message, std::string code,
                              std::string param) {
  if (param.empty() && status == 400 && message.size() > 2 && message[0] == '\'') {
    const size_t end = message.find('\'', 1);
    if (end != std::string::npos) param = message.substr(1, end - 1);
  }
  nlohmann::json err = {{"message", message},
                        {"type", error_type(status)},
                        {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                        {"code", code.empty() ? default_code(status) : code}};
  return dump_json(nlohmann::json{{"error", err}});
}

std::string openai_error_body(const std::exception& e) {
  const int status = http_status_of(e);
  const std::string message =
      status == 500 ? fmt::format("internal error: {}", e.what()) : std::string(e.what());
  if (const auto* h = dynamic_cast<const HttpError*>(&e))
    return openai_error_body(status, message, h->code(), h->param());
  return openai_error_body(status, message);
}

std::string deadline_message(std::chrono::milliseconds limit) {
  return fmt::format("the request ran past its deadline ({:.3g} s) and was stopped",
                     std::chrono::duration<double>(limit).count());
}

std::string tfserving_error_body(const std::string& message) {
  return dump_json(nlohmann::json{{"error", message}});
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

namespace {
template <typename Json>
Json parse_body_as(const std::string& body) {
  if (json_nesting_depth(body) > kMaxJsonDepth)
    throw HttpError(400, fmt::format("the body is nested deeper than {} levels", kMaxJsonDepth),
                    "invalid_json");
  try {
    return Json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    throw HttpError(400, fmt::format("the body is not valid JSON (at byte {})", e.byte),
                    "invalid_json");
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number beyond double
    throw HttpError(400, fmt::format("the body is not valid JSON: {}", e.what()), "invalid_json");
  }
}
}  // namespace

nlohmann::json parse_json_body(const std::string& body) {
  return parse_body_as<nlohmann::json>(body);
}

nlohmann::ordered_json parse_ordered_json_body(const std::string& body) {
  return parse_body_as<nlohmann::ordered_json>(body);
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string request_id(const std::string* given) {
  bool valid = given && !given->empty() && given->size() <= 128;
  for (size_t i = 0; valid && i < given->size(); ++i)
    valid = (*given)[i] >= 0x21 && (*given)[i] <= 0x7e;
  return valid ? *given : random_id("req-");
}

namespace {

// TF Serving's API name and entrypoint of a request of its APIs (TF Serving's REST paths, its gRPC
// services); nullptr for tokenflow's own (OpenAI, admin, tokenflow.v1).
const char* tf_serving_api(const std::string& path, const char** entrypoint) {
  static const std::string kPrediction = "/tensorflow.serving.PredictionService/",
                           kModel = "/tensorflow.serving.ModelService/", kRest = "/v1/models/";
  if (path.starts_with(kPrediction) || path.starts_with(kModel)) {
    *entrypoint = "GRPC";
    const std::string method = path.substr(path.rfind('/') + 1);
    for (const char* api : {"Predict", "GetModelMetadata", "GetModelStatus", "Classify", "Regress",
                            "MultiInference", "HandleReloadConfigRequest"})
      if (method == api) return api;
    return nullptr;
  }
  if (!path.starts_with(kRest)) return nullptr;
  *entrypoint = "REST";
  if (path.ends_with(":predict")) return "Predict";
  if (path.ends_with(":classify")) return "Classify";
  if (path.ends_with(":regress")) return "Regress";
  if (path.ends_with("/metadata")) return "GetModelMetadata";
  return "GetModelStatus";
}

}  // namespace

void unknown_field(const std::string& key) {
  throw HttpError(400, fmt::format("Unrecognized request argument supplied: {}", key),
                  "unknown_parameter", key);
}

std::string string_field(const nlohmann::json& body, const char* key) {
  if (!present(body, key)) return {};
  if (!body[key].is_string())
    throw HttpError(400, fmt::format("'{}' must be a string", key), "", key);
  return body[key].get<std::string>();
}

bool bool_field(const nlohmann::json& body, const char* key, bool fallback) {
  if (!present(body, key)) return fallback;
  if (!body[key].is_boolean())
    throw HttpError(400, fmt::format("'{}' must be true or false", key), "", key);
  return body[key].get<bool>();
}

void log_request(const RequestRecord& r, int status) {
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.received)
          .count();
  if (r.metrics) {
    const std::string version = r.version >= 0 ? std::to_string(r.version) : "";
    const char* outcome = status == 499   ? "client_gone"
                          : status >= 500 ? "server_error"
                          : status >= 400 ? "client_error"
                                          : "success";
    const std::string model = r.model_unknown ? "" : r.model;
    Labels labels = {{"model", model},
                     {"version", version},
                     {"code", std::to_string(status)},
                     {"outcome", outcome},
                     {"task", request_task(r.path)}};
    if (r.key) {  // per-key series only where keys are on
      labels.emplace_back("key", r.key->name);
      r.metrics->key_tokens.add({{"key", r.key->name}, {"model", model}, {"type", "prompt"}},
                                static_cast<double>(r.prompt_tokens));
      r.metrics->key_tokens.add({{"key", r.key->name}, {"model", model}, {"type", "generation"}},
                                static_cast<double>(r.completion_tokens));
    }
    r.metrics->requests.add(labels);
    r.metrics->request_duration.observe({{"model", model}, {"version", version}}, ms / 1000);
    const char* entrypoint = "";
    if (const char* api = tf_serving_api(r.path, &entrypoint)) {
      r.metrics->tf_request_count.add(
          {{"model_name", model}, {"status", grpc_code_name(grpc_code_for_http(status))}});
      r.metrics->tf_request_latency.observe(
          {{"model_name", model}, {"API", api}, {"entrypoint", entrypoint}}, ms * 1000);
    }
  }
  nlohmann::ordered_json j = {
      {"time", fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", fmt::gmtime(std::time(nullptr)))},
      {"request_id", r.id},
      {"remote", r.remote},
      {"method", r.method},
      {"path", r.path},
      {"model",
       r.model.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.model.substr(0, 256))},
      {"version", r.version >= 0 ? nlohmann::ordered_json(r.version) : nlohmann::ordered_json()},
      {"status", status},
      {"prompt_tokens", r.prompt_tokens},
      {"completion_tokens", r.completion_tokens},
      {"ttft_ms", r.ttft_ms >= 0 ? nlohmann::ordered_json(std::round(r.ttft_ms * 10) / 10)
                                 : nlohmann::ordered_json()},
      {"duration_ms", std::round(ms * 10) / 10},
      {"finish_reason",
       r.finish.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.finish)}};
  if (r.key) j["key"] = r.key->name;  // the key's name, never the key
  if (r.access_log && r.access_log->log_prompts() && !r.prompt.empty()) j["prompt"] = r.prompt;
  const std::string line = dump_json(j);
  if (r.access_log) {
    r.access_log->write(line);
  } else {
    log::debug("request {}", line);
  }
}

AccessLog::AccessLog(const std::string& path, bool log_prompts) : log_prompts_(log_prompts) {
  if (path == "-") {
    f_ = stderr;
  } else {
    f_ = std::fopen(path.c_str(), "a");
    if (!f_) fail(ErrorKind::kInvalidArgument, "cannot open access log {}", path);
    owned_ = true;
  }
}

AccessLog::~AccessLog() {
  if (owned_) std::fclose(f_);
}

void AccessLog::write(const std::string& line) {
  std::lock_guard lock(mu_);
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fputc('\n', f_);
  std::fflush(f_);
}

}  // namespace tf
