#include "serving/core/status_codes.h"

namespace tf {

int grpc_code_for_http(int status) {
  int code = grpc_code::INTERNAL;
  switch (status) {
    case 200:
      code = grpc_code::OK;
      break;
    case 400:
    case 405:
    case 413:
    case 422:
      code = grpc_code::INVALID_ARGUMENT;
      break;
    case 401:
      code = grpc_code::UNAUTHENTICATED;
      break;
    case 403:
      code = grpc_code::PERMISSION_DENIED;
      break;
    case 404:
      code = grpc_code::NOT_FOUND;
      break;
    case 409:
      code = grpc_code::ABORTED;
      break;
    case 429:
      code = grpc_code::RESOURCE_EXHAUSTED;
      break;
    case 499:
      code = grpc_code::CANCELLED;
      break;
    case 501:
      code = grpc_code::UNIMPLEMENTED;
      break;
    case 503:
      code = grpc_code::UNAVAILABLE;
      break;
    case 504:
      code = grpc_code::DEADLINE_EXCEEDED;
      break;
    default:
      code = status >= 500 ? grpc_code::INTERNAL : grpc_code::INVALID_ARGUMENT;
  }
  return code;
}

int http_status_for_grpc(int code) {
  switch (code) {
    case grpc_code::OK:
      return 200;
    case grpc_code::CANCELLED:
      return 499;
    case grpc_code::INVALID_ARGUMENT:
    case grpc_code::FAILED_PRECONDITION:
    case grpc_code::OUT_OF_RANGE:
      return 400;
    case grpc_code::DEADLINE_EXCEEDED:
      return 504;
    case grpc_code::NOT_FOUND:
      return 404;
    case grpc_code::ALREADY_EXISTS:
    case grpc_code::ABORTED:
      return 409;
    case grpc_code::PERMISSION_DENIED:
      return 403;
    case grpc_code::UNAUTHENTICATED:
      return 401;
    case grpc_code::RESOURCE_EXHAUSTED:
      return 429;
    case grpc_code::UNIMPLEMENTED:
      return 501;
    case grpc_code::UNAVAILABLE:
      return 503;
    default:
      return 500;
  }
}

const char* grpc_code_name(int code) {
  switch (code) {
    case grpc_code::OK:
      return "OK";
    case grpc_code::CANCELLED:
      return "CANCELLED";
    case grpc_code::UNKNOWN:
      return "UNKNOWN";
    case grpc_code::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc_code::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc_code::NOT_FOUND:
      return "NOT_FOUND";
    case grpc_code::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc_code::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc_code::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc_code::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc_code::ABORTED:
      return "ABORTED";
    case grpc_code::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc_code::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc_code::INTERNAL:
      return "INTERNAL";
    case grpc_code::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc_code::DATA_LOSS:
      return "DATA_LOSS";
    case grpc_code::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace tf
