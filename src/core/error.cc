#include "core/error.h"

namespace tf {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid_argument";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kResourceExhausted:
      return "resource_exhausted";
    case ErrorKind::kUnavailable:
      return "unavailable";
    case ErrorKind::kCancelled:
      return "cancelled";
    case ErrorKind::kDeadlineExceeded:
      return "deadline_exceeded";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "unknown";
}

}  // namespace tf
