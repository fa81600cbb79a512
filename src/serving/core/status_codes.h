#pragma once
// The status table every door shares, as plain ints: HTTP statuses and gRPC's status codes
// (their numbers are gRPC's and tensorflow.error.Code's), each mapped to the other. The gRPC
// layer converts to grpc::StatusCode at its edge (grpc/grpc_call.h); nothing here includes gRPC.

namespace tf {

namespace grpc_code {
inline constexpr int OK = 0;
inline constexpr int CANCELLED = 1;
inline constexpr int UNKNOWN = 2;
inline constexpr int INVALID_ARGUMENT = 3;
inline constexpr int DEADLINE_EXCEEDED = 4;
inline constexpr int NOT_FOUND = 5;
inline constexpr int ALREADY_EXISTS = 6;
inline constexpr int PERMISSION_DENIED = 7;
inline constexpr int RESOURCE_EXHAUSTED = 8;
inline constexpr int FAILED_PRECONDITION = 9;
inline constexpr int ABORTED = 10;
inline constexpr int OUT_OF_RANGE = 11;
inline constexpr int UNIMPLEMENTED = 12;
inline constexpr int INTERNAL = 13;
inline constexpr int UNAVAILABLE = 14;
inline constexpr int DATA_LOSS = 15;
inline constexpr int UNAUTHENTICATED = 16;
}  // namespace grpc_code

// The gRPC code an HTTP status answers with (400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403
// PERMISSION_DENIED, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 499 CANCELLED, 503 UNAVAILABLE, 504
// DEADLINE_EXCEEDED, other 5xx INTERNAL, other 4xx INVALID_ARGUMENT; 200 OK).
int grpc_code_for_http(int status);
// The HTTP status a gRPC code stands for in logs and tokenflow_requests_total (TF Serving's
// table: CANCELLED 499, INVALID_ARGUMENT 400, ...).
int http_status_for_grpc(int code);
// "OK", "INVALID_ARGUMENT", ... ("UNKNOWN" for a number gRPC does not define).
const char* grpc_code_name(int code);

}  // namespace tf
