#pragma once
// One error type for the whole project. The message names what is at fault (a file, a tensor,
// a field, a parameter) so a user can fix it without reading the source; the kind lets the
// serving layer map it to a status code.

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace tf {

enum class ErrorKind {
  kInvalidArgument,    // bad input from a user: a file, a request, a parameter
  kNotFound,           // a file, model or tensor that does not exist
  kUnsupported,        // well-formed input that we cannot run (yet)
  kResourceExhausted,  // a request or file too large for a limit (memory, KV blocks)
  kUnavailable,        // overloaded (a full queue) or shutting down: retry later
  kCancelled,          // the caller went away or cancelled (core/cancel.h)
  kDeadlineExceeded,   // the work ran past its deadline (core/cancel.h)
  kInternal,           // a bug on our side
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  explicit Error(const std::string& message) : Error(ErrorKind::kInvalidArgument, message) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// An Error about one field of a request (a parameter): its name travels with it, so that an API
// can name the field (OpenAI's "param", gRPC's error-param) without reading the message.
class FieldError : public Error {
 public:
  FieldError(std::string field, const std::string& message)
      : Error(ErrorKind::kInvalidArgument, message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// Throws a FieldError about field with a formatted message.
template <typename... Args>
[[noreturn]] void fail_field(std::string field, fmt::format_string<Args...> format,
                             Args&&... args) {
  throw FieldError(std::move(field), fmt::format(format, std::forward<Args>(args)...));
}

// Throws an Error of kind kInvalidArgument with a formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(ErrorKind::kInvalidArgument, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(kind, fmt::format(format, std::forward<Args>(args)...));
}

// For conditions that only a bug can break; still an exception, never undefined behaviour.
#define TF_CHECK(cond)                                                                             \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::tf::fail(::tf::ErrorKind::kInternal, "internal check failed: {} ({}:{})", #cond, __FILE__, \
                 __LINE__);                                                                        \
  } while (0)

}  // namespace tf
