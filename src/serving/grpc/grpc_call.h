#pragma once
// What every gRPC method shares: the request record (id from x-request-id metadata, the API key
// from `authorization` metadata, the access log line and the metrics at the end), the mapping
// of the server's errors to gRPC status codes, and the strand a call's generation job runs on.

#include <grpcpp/grpcpp.h>

#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/cancel.h"
#include "serving/core/api_common.h"
#include "serving/core/generation_job.h"
#include "serving/core/job_host.h"
#include "serving/core/job_lifecycle.h"
#include "serving/core/job_summary.h"
#include "serving/core/serving_state.h"
#include "serving/core/status_codes.h"
#include "serving/grpc/grpc_sync.h"
#include "serving/models/model_registry.h"
#include "tensorflow_serving/apis/model.pb.h"

namespace tf {

// What the gRPC services of one server share.
struct GrpcContext {
  ServingState& state;
  boost::asio::thread_pool& pool;  // runs the calls' strands (generation output, callbacks)
};

// The gRPC status an error answers with: HttpError's status mapped (400 INVALID_ARGUMENT, 401
// UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 503
// UNAVAILABLE, 504 DEADLINE_EXCEEDED, ...), other errors by their kind.
grpc::Status grpc_status_of(const std::exception& e);
// core/status_codes.h's tables in gRPC's types.
inline grpc::StatusCode grpc_code_of_http(int status) {
  return static_cast<grpc::StatusCode>(grpc_code_for_http(status));
}
inline int http_status_of(grpc::StatusCode code) {
  return http_status_for_grpc(static_cast<int>(code));
}
inline const char* grpc_code_name(grpc::StatusCode code) {
  return grpc_code_name(static_cast<int>(code));
}

// What a finished job ends with (the outcome's one gRPC mapping): OK; the engine's failure
// (INTERNAL, or RESOURCE_EXHAUSTED for a request's own constraint past its budget);
// DEADLINE_EXCEEDED; for a client gone, what client_gone_status says. Generate, GenerateStream
// and Predict alike.
grpc::Status grpc_status(const JobEnd& end, grpc::CallbackServerContext* ctx);

// The version a TF Serving ModelSpec asks for (its name, and a version or a label); HttpError
// 400 (TF Serving's message) without a name.
ModelRequestSpec model_spec_of(const tfs::ModelSpec& spec);

// A unary call answered at once: admits it, runs fn(call) to fill the response, and finishes
// with OK or the error fn throws.
template <typename Fn>
grpc::ServerUnaryReactor* answer_now(GrpcContext& ctx, grpc::CallbackServerContext* server_ctx,
                                     const char* service, const char* method, Fn fn);

// How a call whose client left ends (and is logged): its own deadline, or a cancellation.
grpc::Status client_gone_status(grpc::CallbackServerContext* ctx);

// One call's record: created when the call starts, logged once when it finishes.
class GrpcCall {
 public:
  // service: "tokenflow.v1.GenerationService"; type: "unary" or "server_stream".
  GrpcCall(GrpcContext& ctx, grpc::CallbackServerContext* server_ctx, const char* service,
           const char* method, const char* type);
  // Authenticates (keys on: the `authorization` metadata, "Bearer KEY") and refuses calls while
  // the server drains; throws HttpError.
  void admit();
  // The first value of a client metadata key (lower case), or nullopt.
  std::optional<std::string> metadata(const std::string& key) const;
  // A traffic split's sticky header, read from the metadata of that name.
  ModelRegistry::HeaderFn header_fn() const;
  // The call's deadline as a time limit from its arrival; nullopt without one.
  std::optional<std::chrono::milliseconds> time_limit() const;
  // The status an error ends this call with (grpc_status_of); the REST error's code, field and
  // retry time go with it as trailing metadata: error-code, error-param, retry-after.
  grpc::Status error_status(const std::exception& e);
  // Logs the call (access log, tokenflow_requests_total, grpc_server_handled_total) with the
  // status it ends with. Once.
  void finish(const grpc::Status& status);

  std::shared_ptr<RequestRecord> record;

 private:
  GrpcContext& ctx_;
  grpc::CallbackServerContext* server_ctx_;
  const char* service_;
  const char* method_;
  const char* type_;
  std::atomic<bool> finished_{false};
};

// The JobHost of one call: a strand on the gRPC context's pool, and the client's cancellation
// (OnCancel: a cancelled call or a passed deadline) as the disconnect.
class GrpcCallHost : public JobHost, public std::enable_shared_from_this<GrpcCallHost> {
 public:
  explicit GrpcCallHost(boost::asio::thread_pool& pool) : strand_(pool.get_executor()) {}
  void post(std::function<void()> fn) override;
  void on_disconnect(std::function<void()> fn) override;
  bool disconnected() const override { return gone_; }
  // The client cancelled: cancels token, runs the disconnect callback on the strand.
  void cancelled();
  // Cancels the call's preparation (parsing, tokenizing) when the client goes.
  const std::shared_ptr<CancelToken> token = std::make_shared<CancelToken>();

 private:
  boost::asio::strand<boost::asio::thread_pool::executor_type> strand_;
  std::atomic<bool> gone_{false};
  std::function<void()> on_gone_;  // used on the strand only
};

// A call's job (core/job_lifecycle.h: run_job with the call's host): the outputs and the end
// handed to functions, a refused start to failed; the call logs itself when it finishes.
class GrpcJobSink final : public JobSink {
 public:
  using OutputFn = std::function<void(size_t prompt, const RequestOutput& out)>;
  using EndFn = std::function<void(const JobEnd& end, const GenerationJob& job)>;
  using FailedFn = std::function<void(const std::exception& e)>;
  GrpcJobSink(OutputFn output, EndFn end, FailedFn failed)
      : output_(std::move(output)), end_(std::move(end)), failed_(std::move(failed)) {}
  void output(size_t prompt, const RequestOutput& out) override {
    if (output_) output_(prompt, out);
  }
  void end(const JobEnd& end, const GenerationJob& job) override { end_(end, job); }
  bool answers_start_failure() const override { return true; }
  void start_failed(const std::exception& e) override { failed_(e); }
  bool logs_itself() const override { return true; }

 private:
  OutputFn output_;
  EndFn end_;
  FailedFn failed_;
};

// Runs fn on the server's preparation pool (ServingState::prepare_pool) under the host's token,
// with the server's time limit for the call as its deadline: the planning of a request (its
// prompt tokenized) stays off gRPC's threads. fn answers the call itself and must not throw.
void prepare_call(GrpcContext& ctx, const GrpcCallHost& host, const RequestRecord& record,
                  std::function<void()> fn);

// A unary call answered later, by a generation job: its reactor. The client's cancellation (or
// deadline) reaches the job through host; finish() logs and ends the call, once. Deletes itself
// when gRPC is done with it.
class UnaryJobCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryJobCall(GrpcContext& ctx, grpc::CallbackServerContext* server_ctx, const char* service,
               const char* method)
      : call(ctx, server_ctx, service, method, "unary"),
        host(std::make_shared<GrpcCallHost>(ctx.pool)),
        server_ctx(server_ctx) {}
  void OnCancel() override {
    GrpcCallbackScope scope;
    host->cancelled();
  }
  void OnDone() override {
    grpc_handoff_acquire();
    delete this;
  }
  void finish(const grpc::Status& status) {
    call.finish(status);
    grpc_handoff_release();
    Finish(status);
  }
  GrpcCall call;
  std::shared_ptr<GrpcCallHost> host;
  grpc::CallbackServerContext* server_ctx;
};

template <typename Fn>
grpc::ServerUnaryReactor* answer_now(GrpcContext& ctx, grpc::CallbackServerContext* server_ctx,
                                     const char* service, const char* method, Fn fn) {
  GrpcCallbackScope scope;
  auto* reactor = server_ctx->DefaultReactor();
  GrpcCall call(ctx, server_ctx, service, method, "unary");
  grpc::Status status = grpc::Status::OK;
  try {
    call.admit();
    fn(call);
  } catch (const std::exception& e) {
    status = call.error_status(e);
  }
  call.finish(status);
  grpc_handoff_release();
  reactor->Finish(status);
  return reactor;
}

}  // namespace tf
