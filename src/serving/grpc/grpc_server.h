#pragma once
// The gRPC front door (`tokenflow serve --grpc-port N`), beside the HTTP server and sharing its
// ServingState (registry, engines, keys, limits, metrics): the services handed in by the
// composition root (model_server.h: tokenflow.v1.GenerationService, TF Serving's ModelService and
// PredictionService), the standard grpc.health.v1.Health service ("" for the server, one entry
// per service and per model name for its readiness) and server reflection.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "serving/core/serving_state.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace tf {

struct GrpcContext;

// A service the server serves: made over the server's context (grpc_call.h), reported to health
// checks under its full name, up while a model serves (needs_model) or while the server is not
// draining.
struct GrpcServiceSpec {
  std::function<std::unique_ptr<grpc::Service>(GrpcContext&)> make;
  std::string name;  // "tokenflow.v1.GenerationService"
  bool needs_model = true;
};

struct GrpcServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see port())
  int max_message_bytes = 8 << 20;
  // TLS when both are set (the same PEM files as HTTPS).
  std::string tls_cert, tls_key;
  // Or the PEM text itself (TF Serving's SSLConfig), which wins when set; a client CA (PEM) to
  // verify client certificates against, and whether every client must present one.
  std::string tls_cert_pem, tls_key_pem, tls_client_ca_pem;
  bool tls_client_verify = false;
  // gRPC's own channel arguments (TF Serving's --grpc_channel_arguments): integer values are
  // passed as integers. And the most threads gRPC may use (0: its default).
  std::vector<std::pair<std::string, std::string>> channel_arguments;
  int max_threads = 0;
  // Also listen on this UNIX socket (TF Serving's --grpc_socket_path); "" none.
  std::string unix_socket;
  // How often per-model health follows the registry.
  std::chrono::milliseconds health_interval{500};
};

class GrpcServer {
 public:
  // Binds and starts serving; throws Error when the address cannot be bound.
  GrpcServer(ServingState& state, GrpcServerConfig config, std::vector<GrpcServiceSpec> services);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  uint16_t port() const { return port_; }
  // Reports NOT_SERVING everywhere, refuses new calls, lets calls in progress finish until the
  // deadline, then cancels the rest (their engine requests with them).
  void shutdown(std::chrono::steady_clock::time_point deadline);

  struct Impl;

 private:
  void health_loop();
  void update_health();

  ServingState& state_;
  GrpcServerConfig config_;
  std::vector<GrpcServiceSpec> specs_;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::set<std::string> known_;  // every model name health has reported
  std::thread health_;
};

}  // namespace tf
