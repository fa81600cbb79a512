#pragma once
// The part of the gRPC server that is gRPC's own code: the services' constructors, which
// instantiate grpc++'s method handlers (CallbackUnaryHandler and friends: the call objects,
// their operation sets and interceptor batches), and the server's interceptor. In the tsan tree
// grpc_services.cc is compiled without ThreadSanitizer, like Debian's gRPC it belongs with: the
// handlers hand calls between gRPC's threads through synchronization in the uninstrumented
// library, so instrumenting their header code only reports gRPC's handoffs as races. Our side of
// every handoff (the reactors, the jobs) stays instrumented (grpc_sync.h).

#include <grpcpp/support/server_interceptor.h>

#include <memory>

namespace tf {

// Turns gRPC's UNIMPLEMENTED answer to a request message that does not parse into
// INVALID_ARGUMENT naming the method.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
unparsed_request_interceptors();

}  // namespace tf
