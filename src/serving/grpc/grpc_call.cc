#include "serving/grpc/grpc_call.h"

#include <boost/asio/post.hpp>

#include <cctype>

#include <fmt/format.h>

#include "core/log.h"

namespace tf {

grpc::Status grpc_status_of(const std::exception& e) {
  return grpc::Status(grpc_code_of_http(http_status_of(e)), e.what());
}

grpc::Status grpc_status(const JobEnd& end, grpc::CallbackServerContext* ctx) {
  if (end.ok()) return grpc::Status::OK;
  if (end.outcome == JobOutcome::kClientGone) return client_gone_status(ctx);
  // A request's own constraint past its budget: the client's error, and a resource it used up
  // (REST answers it 400).
  if (end.outcome == JobOutcome::kFailed && end.summary.error_kind == ErrorKind::kResourceExhausted)
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, end.summary.error);
  return grpc_status_of(end.error());
}

GrpcCall::GrpcCall(GrpcContext& ctx, grpc::CallbackServerContext* server_ctx, const char* service,
                   const char* method, const char* type)
    : record(std::make_shared<RequestRecord>()),
      ctx_(ctx),
      server_ctx_(server_ctx),
      service_(service),
      method_(method),
      type_(type) {
  record->received = std::chrono::steady_clock::now();
  const auto given = metadata("x-request-id");
  record->id = request_id(given ? &*given : nullptr);
  record->method = "GRPC";
  record->path = fmt::format("/{}/{}", service, method);
  record->remote = server_ctx->peer();
  record->metrics = &ctx.state.metrics;
  record->access_log = ctx.state.access_log.get();
  server_ctx->AddInitialMetadata("x-request-id", record->id);
  ctx.state.metrics.grpc_started.add(
      {{"grpc_service", service}, {"grpc_method", method}, {"grpc_type", type}});
}

grpc::Status GrpcCall::error_status(const std::exception& e) {
  if (const auto* he = dynamic_cast<const HttpError*>(&e)) {
    if (!he->code().empty()) server_ctx_->AddTrailingMetadata("error-code", he->code());
    if (!he->param().empty()) server_ctx_->AddTrailingMetadata("error-param", he->param());
    if (he->retry_after_seconds() > 0)
      server_ctx_->AddTrailingMetadata("retry-after", std::to_string(he->retry_after_seconds()));
  }
  return grpc_status_of(e);
}

void GrpcCall::admit() {
  if (ctx_.state.draining) throw HttpError(503, "the server is shutting down");
  const auto auth = metadata("authorization");
  record->key = ctx_.state.authenticate(auth ? &*auth : nullptr);
}

std::optional<std::string> GrpcCall::metadata(const std::string& key) const {
  const auto& md = server_ctx_->client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

ModelRegistry::HeaderFn GrpcCall::header_fn() const {
  return [this](const std::string& name) {
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return metadata(lower).value_or("");
  };
}

std::optional<std::chrono::milliseconds> GrpcCall::time_limit() const {
  const auto deadline = server_ctx_->deadline();
  const auto now = std::chrono::system_clock::now();
  // No deadline reads as the far future.
  if (deadline - now > std::chrono::hours(24 * 365)) return std::nullopt;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
  const auto since_arrival = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - record->received);
  return std::max(std::chrono::milliseconds(1), left + since_arrival);
}

void GrpcCall::finish(const grpc::Status& status) {
  if (finished_.exchange(true)) return;
  const int http = http_status_of(status.error_code());
  if (http >= 500 && http != 503 && http != 504)
    log::error("gRPC call {} {} failed: {}", record->id, record->path, status.error_message());
  log_request(*record, http);
  ctx_.state.metrics.grpc_handled.add({{"grpc_service", service_},
                                       {"grpc_method", method_},
                                       {"grpc_type", type_},
                                       {"grpc_code", grpc_code_name(status.error_code())}});
}

ModelRequestSpec model_spec_of(const tfs::ModelSpec& spec) {
  if (spec.name().empty())
    throw HttpError(400, "Missing model name in request.", "", "model_spec.name");
  ModelRequestSpec out{spec.name(), std::nullopt, std::nullopt};
  if (spec.has_version()) out.version = spec.version().value();
  if (spec.version_choice_case() == tfs::ModelSpec::kVersionLabel) out.label = spec.version_label();
  return out;
}

grpc::Status client_gone_status(grpc::CallbackServerContext* server_ctx) {
  if (server_ctx->deadline() <= std::chrono::system_clock::now())
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded");
  return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
}

void GrpcCallHost::post(std::function<void()> fn) {
  boost::asio::post(strand_, std::move(fn));
}

void GrpcCallHost::on_disconnect(std::function<void()> fn) {
  // Set before the job's streams are listened to; a cancellation before it is seen here.
  post([self = shared_from_this(), fn = std::move(fn)]() mutable {
    self->on_gone_ = std::move(fn);
    if (self->gone_ && self->on_gone_) self->on_gone_();
  });
}

void prepare_call(GrpcContext& ctx, const GrpcCallHost& host, const RequestRecord& record,
                  std::function<void()> fn) {
  host.token->limit_deadline(record.received + ctx.state.limits.max_request_time);
  ctx.state.prepare_pool.run(host.token, std::move(fn));
}

void GrpcCallHost::cancelled() {
  token->cancel();
  post([self = shared_from_this()] {
    if (self->gone_.exchange(true)) return;
    if (self->on_gone_) self->on_gone_();
  });
}

}  // namespace tf
