#pragma once
// The HTTP front door: authenticates every request, stamps X-Request-Id, hands POSTs to the
// preparation pool, finds the route (routes.h: the admin routes are its own, each protocol's are
// added by the composition root, model_server.h), answers errors in the route's shape, serves
// the playground's files, and shuts down gracefully.

#include <chrono>
#include <memory>

#include "serving/core/api_common.h"
#include "serving/core/serving_state.h"
#include "serving/http/http_server.h"
#include "serving/http/routes.h"

namespace tf {

class Server {
 public:
  Server(ServingState& state, HttpServerConfig config);
  // The table the protocols add their routes to, before start().
  RouteTable& routes() { return routes_; }
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
  // GET /metrics, or TF Serving's monitoring path when one is configured.
  bool is_metrics_path(const std::string& p) const {
    return p == "/metrics" || (!state_.prometheus_path.empty() && p == state_.prometheus_path);
  }

  ServingState& state_;
  RouteTable routes_;
  HttpServer http_;
};

}  // namespace tf
