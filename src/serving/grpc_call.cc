#include "serving/grpc_call.h"

#include <boost/asio/post.hpp>

#include <cctype>

#include <fmt/format.h>

#include "core/log.h"

namespace tf {

grpc::StatusCode grpc_code_of_http(int status) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (status) {
    case 200:
      code = grpc::StatusCode::OK;
      break;
    case 400:
    case 405:
    case 413:
    case 422:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case 401:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    case 403:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case 404:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case 409:
      code = grpc::StatusCode::ABORTED;
      break;
    case 429:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case 499:
      code = grpc::StatusCode::CANCELLED;
      break;
    case 501:
      code = grpc::StatusCode::UNIMPLEMENTED;
      break;
    case 503:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case 504:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    default:
      code = status >= 500 ? grpc::StatusCode::INTERNAL : grpc::StatusCode::INVALID_ARGUMENT;
  }
  return code;
}

grpc::Status grpc_status_of(const std::exception& e) {
  return grpc::Status(grpc_code_of_http(http_status_of(e)), e.what());
}

int http_status_of(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED:
      return 409;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    default:
      return 500;
  }
}

const char* grpc_code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
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

void start_call_job(GrpcContext& ctx, std::shared_ptr<GrpcCallHost> host, Engine& engine,
                    std::vector<GenerationRequest> requests, JobObserver observer,
                    GenerationJob::EventFn on_event,
                    std::function<void(const GenerationJob&, bool)> done,
                    std::function<void(const std::exception&)> failed) {
  try {
    GenerationJob::start(engine, std::move(requests), std::move(host), ctx.state.jobs,
                         std::move(on_event), std::move(done), std::move(observer));
  } catch (const std::exception& e) {
    failed(e);
  }
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
