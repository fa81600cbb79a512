#include "serving/grpc_services.h"

#include <fmt/format.h>

#include <string>

#include "serving/grpc_generation.h"
#include "serving/grpc_model_service.h"
#include "serving/grpc_prediction_service.h"
#include "serving/grpc_sync.h"

namespace tf {
namespace {

// A request message that does not parse never reaches a handler: gRPC's callback API answers
// it UNIMPLEMENTED with no message (as for a method nobody implements). This interceptor sees
// the message arrive unparsed (POST_RECV_MESSAGE without a message) and turns that answer into
// INVALID_ARGUMENT. Methods that are really not implemented (no message was received for them)
// and unknown methods keep UNIMPLEMENTED.
class UnparsedRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit UnparsedRequestInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    // gRPC runs every batch of a call's operations through here, on whichever of its threads
    // carries it: the one hook into its handoffs (grpc_sync.h), e.g. a response built on our
    // strand and serialized on a gRPC thread.
    GrpcCallbackScope scope;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      received_ = true;
      parsed_ = methods->GetRecvMessage() != nullptr;
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (received_ && !parsed_ && status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
          status.error_message().empty()) {
        methods->ModifySendStatus(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         fmt::format("the request message of {} does not parse", method_)));
      }
    }
    methods->Proceed();
  }

 private:
  std::string method_;
  bool received_ = false;
  bool parsed_ = false;
};

class UnparsedRequestInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new UnparsedRequestInterceptor(info);
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
unparsed_request_interceptors() {
  return std::make_unique<UnparsedRequestInterceptorFactory>();
}

// The constructors register each method's handler with gRPC (the generated
// WithCallbackMethod_* bases): the handler templates are instantiated here.
GenerationServiceImpl::GenerationServiceImpl(GrpcContext& ctx) : ctx_(ctx) {}
ModelServiceImpl::ModelServiceImpl(GrpcContext& ctx) : ctx_(ctx) {}
PredictionServiceImpl::PredictionServiceImpl(GrpcContext& ctx) : ctx_(ctx) {}

}  // namespace tf
