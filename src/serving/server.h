#pragma once
// The HTTP front door: routes every request (OpenAI, TF Serving REST, health) to its handler,
// turns errors into the route's error shape, stamps X-Request-Id, and shuts down gracefully.

#include <chrono>
#include <memory>

#include "serving/api_common.h"
#include "serving/http_server.h"
#include "serving/serving_state.h"

namespace tf {

class Server {
 public:
  Server(ServingState& state, HttpServerConfig config);
  void start() { http_.start(); }
  uint16_t port() const { return http_.port(); }
  // Stops accepting, answers 503 to new requests and /readyz, lets responses in progress finish
  // until the grace period ends, then closes every connection. True if nothing was cut off.
  bool shutdown(std::chrono::milliseconds grace);
  const HttpServer& http() const { return http_; }

 private:
  int64_t slow_reader_streams() const {
    return http_.slow_reader_streams() + state_.grpc_slow_reader_streams.load();
  }
  void handle(HttpRequest req, std::shared_ptr<HttpResponder> responder);
  // Authenticates, routes and answers errors in the route's shape.
  void serve(const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
             std::shared_ptr<RequestRecord> record);
  // Throws HttpError 401 when keys are on and the request's key is missing or unknown; sets
  // record.key otherwise.
  void authenticate(const HttpRequest& req, RequestRecord& record) const;
  void route(const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
             std::shared_ptr<RequestRecord> record);
  // Answers an error in the route's shape (OpenAI's {"error": {...}} or TF Serving's
  // {"error": "..."}) with Retry-After / WWW-Authenticate where they belong, and logs it.
  enum class ErrorShape { kOpenAi, kTfServing };
  void answer_error(const std::exception& e, ErrorShape shape, HttpResponder& responder,
                    const RequestRecord& record);
  // GET /metrics: Prometheus text format.
  std::string render_metrics(bool tf_serving_names) const;
  // GET /metrics, or TF Serving's monitoring path when one is configured.
  bool is_metrics_path(const std::string& p) const {
    return p == "/metrics" || (!state_.prometheus_path.empty() && p == state_.prometheus_path);
  }
  // POST /v1/admin/reload: applies a new model config (the body, or the config file).
  void handle_reload(const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
                     std::shared_ptr<RequestRecord> record);

  ServingState& state_;
  HttpServer http_;
};

}  // namespace tf
