#pragma once
// What the HTTP routes share: the mapping from errors to status codes, the two error shapes
// (OpenAI's and TF Serving's), JSON output that never throws on odd bytes, and the one log line
// per request.

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <type_traits>

#include "core/cancel.h"
#include "core/error.h"
#include "core/random_id.h"

namespace tf {

struct ServerMetrics;
struct KeyPolicy;

// An error with the HTTP status it answers with.
class HttpError : public Error {
 public:
  HttpError(int status, const std::string& message, std::string code = "", std::string param = "")
      : Error(status >= 500 ? ErrorKind::kInternal : ErrorKind::kInvalidArgument, message),
        status_(status),
        code_(std::move(code)),
        param_(std::move(param)) {}
  int status() const { return status_; }
  // Seconds for a Retry-After header (429, 503); 0: the default of 1.
  HttpError& retry_after(int seconds) {
    retry_after_ = seconds;
    return *this;
  }
  int retry_after_seconds() const { return retry_after_; }
  const std::string& code() const { return code_; }
  const std::string& param() const { return param_; }

 private:
  int status_;
  int retry_after_ = 0;
  std::string code_, param_;
};

// The status an error answers with: HttpError's own; 400 for invalid, unsupported or too large
// input, 404 for what does not exist, 503 when overloaded, 500 for internal errors.
int http_status_of(const std::exception& e);

// {"error": {"message", "type", "param", "code"}} as OpenAI sends it. param: the field at
// fault (taken from a message that starts with a quoted name when not given).
std::string openai_error_body(int status, const std::string& message, std::string code = "",
                              std::string param = "");
std::string openai_error_body(const std::exception& e);
// {"error": "..."} as TF Serving sends it.
std::string tfserving_error_body(const std::string& message);

// What a request stopped at its deadline is told: "the request ran past its deadline (2.5 s)
// and was stopped".
std::string deadline_message(std::chrono::milliseconds limit);

// Whether a request body has the field with a value (a JSON null counts as absent, as OpenAI
// reads it).
// (A template: an ordered_json body is read as it is, not converted to a json copy per call.)
template <typename Json>
bool present(const Json& body, const char* key) {
  return body.contains(key) && !body[key].is_null();
}

// Runs fn, turning what it throws about the request into HttpError 400: a FieldError naming its
// field (as field_name gives the name the client used; nullptr: as it is), any other Error that
// is not internal with its message. HttpErrors, cancellations and internal errors pass as they
// are.
template <typename Fn, typename Rename = std::nullptr_t>
auto as_bad_request(Fn fn, Rename field_name = nullptr) -> decltype(fn()) {
  try {
    return fn();
  } catch (const HttpError&) {
    throw;
  } catch (const Cancelled&) {
    throw;
  } catch (const FieldError& e) {
    std::string field = e.field();
    if constexpr (!std::is_same_v<Rename, std::nullptr_t>) field = field_name(field);
    throw HttpError(400, e.what(), "", field);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInternal) throw;
    throw HttpError(400, e.what());
  }
}

// 400 "Unrecognized request argument supplied: KEY" (OpenAI's words, code unknown_parameter).
[[noreturn]] void unknown_field(const std::string& key);
// A body must be an object whose every member known(name) accepts: 400 otherwise.
template <typename Json, typename Known>
void check_known_fields(const Json& body, Known known) {
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  for (auto it = body.begin(); it != body.end(); ++it)
    if (!known(it.key())) unknown_field(it.key());
}
// A string field ("" when absent or null), a boolean field (fallback when absent or null):
// 400 naming the field when it holds another type.
std::string string_field(const nlohmann::json& body, const char* key);
bool bool_field(const nlohmann::json& body, const char* key, bool fallback);

// JSON text; invalid UTF-8 (a token that is half a character) becomes U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j);
std::string dump_json(const nlohmann::ordered_json& j);

// Parses a request body; a syntax error is an HttpError 400 naming the position.
nlohmann::json parse_json_body(const std::string& body);
// The same, its objects' members kept in the order sent (a JSON schema's properties).
nlohmann::ordered_json parse_ordered_json_body(const std::string& body);

int64_t unix_seconds();
// A request's id: the client's own (X-Request-Id header, x-request-id metadata) when it is 1 to
// 128 printable ASCII characters, else a fresh "req-..." one.
std::string request_id(const std::string* given);

// The access log: one JSON object per line per request, to a file or stderr. Prompts are written
// only with log_prompts (--log-prompts); API keys never.
class AccessLog {
 public:
  // path: a file (appended to), "-" for stderr; throws Error if it cannot be opened.
  explicit AccessLog(const std::string& path, bool log_prompts = false);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;
  bool log_prompts() const { return log_prompts_; }
  void write(const std::string& line);

 private:
  std::FILE* f_ = nullptr;
  bool owned_ = false, log_prompts_ = false;
  std::mutex mu_;
};

// The facts of one request, logged as one line when its response ends.
struct RequestRecord {
  std::string id, method, path, model, remote;
  // The model name came from the request and names no configured model: the access log keeps
  // it, the metrics count it under model="" (one series, whatever names clients invent).
  bool model_unknown = false;
  int64_t version = -1;              // of the model; -1 when none served the request
  ServerMetrics* metrics = nullptr;  // where log_request counts it (nullptr: not counted)
  AccessLog* access_log = nullptr;   // where log_request writes it (nullptr: the debug log)
  const KeyPolicy* key = nullptr;    // the API key that authenticated it (nullptr: keys are off)
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double ttft_ms = -1;  // the first token of the first sequence, from the request's arrival
  std::string finish;
  std::string prompt;  // kept only when the access log takes prompts
  std::chrono::steady_clock::time_point received;
};
void log_request(const RequestRecord& r, int status);
// Whether the request's access log takes prompts (--log-prompts).
inline bool logs_prompts(const RequestRecord& r) {
  return r.access_log && r.access_log->log_prompts();
}

// What a request path asks a model for, the task label of tokenflow_requests_total: "embed"
// (/v1/embeddings, Ollama's), "score" (rerank, /score), "classify", "other" (admin, models,
// tokenize, health, metrics) or "generate" (every other door).
const char* request_task(std::string_view path);

}  // namespace tf
