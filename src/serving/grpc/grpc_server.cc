#include "serving/grpc/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/server_interceptor.h>
#include <charconv>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/mapped_file.h"
#include "serving/grpc/grpc_call.h"

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
  // gRPC deletes it on whichever thread ends the call.
  ~UnparsedRequestInterceptor() override { grpc_handoff_acquire(); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    // gRPC runs every batch of a call's operations through here, on whichever of its threads
    // carries it: the one hook into its handoffs (grpc_sync.h), e.g. a response built on our
    // strand and serialized on a gRPC thread. Proceed() may hand the batch on to another
    // thread: the release comes before it.
    grpc_handoff_acquire();
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
    grpc_handoff_release();
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
    auto* interceptor = new UnparsedRequestInterceptor(info);
    grpc_handoff_release();
    return interceptor;
  }
};

}  // namespace

struct GrpcServer::Impl {
  explicit Impl(ServingState& state) : pool(1), ctx{state, pool} {}
  boost::asio::thread_pool pool;
  GrpcContext ctx;
  std::vector<std::unique_ptr<grpc::Service>> services;
  std::unique_ptr<grpc::Server> server;
};

GrpcServer::GrpcServer(ServingState& state, GrpcServerConfig config,
                       std::vector<GrpcServiceSpec> services)
    : state_(state),
      config_(std::move(config)),
      specs_(std::move(services)),
      impl_(std::make_unique<Impl>(state)) {
  for (const GrpcServiceSpec& s : specs_) impl_->services.push_back(s.make(impl_->ctx));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!config_.tls_cert_pem.empty() || !config_.tls_key_pem.empty() || !config_.tls_cert.empty() ||
      !config_.tls_key.empty()) {
    const bool pem = !config_.tls_cert_pem.empty() || !config_.tls_key_pem.empty();
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    pair.private_key =
        pem ? config_.tls_key_pem : (config_.tls_key.empty() ? "" : read_file(config_.tls_key));
    pair.cert_chain =
        pem ? config_.tls_cert_pem : (config_.tls_cert.empty() ? "" : read_file(config_.tls_cert));
    if (pair.private_key.empty() || pair.cert_chain.empty())
      fail(ErrorKind::kInvalidArgument, "TLS needs both a certificate and a key");
    // As TF Serving: client certificates are asked for when there is a CA to verify them
    // against, and required with client_verify.
    grpc::SslServerCredentialsOptions ssl(
        config_.tls_client_verify ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
        : config_.tls_client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = config_.tls_client_ca_pem;
    ssl.pem_key_cert_pairs.push_back(pair);
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  const std::string host = config_.host.find(':') != std::string::npos
                               ? fmt::format("[{}]", config_.host)
                               : config_.host;
  int bound = 0;
  builder.AddListeningPort(fmt::format("{}:{}", host, config_.port), creds, &bound);
  if (!config_.unix_socket.empty()) builder.AddListeningPort("unix:" + config_.unix_socket, creds);
  for (const auto& [key, value] : config_.channel_arguments) {
    int number = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (ec == std::errc() && end == value.data() + value.size()) {
      builder.AddChannelArgument(key, number);
    } else {
      builder.AddChannelArgument(key, value);
    }
  }
  if (config_.max_threads > 0) {
    grpc::ResourceQuota quota("tokenflow");
    quota.SetMaxThreads(config_.max_threads);
    builder.SetResourceQuota(quota);
  }
  builder.SetMaxReceiveMessageSize(config_.max_message_bytes);
  builder.SetMaxSendMessageSize(config_.max_message_bytes);
  // A port in use is an error, as for HTTP (gRPC would otherwise share it).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<UnparsedRequestInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(creators));
  for (const auto& s : impl_->services) builder.RegisterService(s.get());
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || bound == 0) {
    fail(ErrorKind::kInvalidArgument, "cannot listen for gRPC on {}:{}", config_.host,
         config_.port);
  }
  port_ = static_cast<uint16_t>(bound);
  update_health();
  health_ = std::thread([this] { health_loop(); });
}

GrpcServer::~GrpcServer() {
  shutdown(std::chrono::steady_clock::now());
  impl_->pool.join();
}

void GrpcServer::update_health() {
  grpc::HealthCheckServiceInterface* health = impl_->server->GetHealthCheckService();
  if (!health) return;
  std::lock_guard lock(mu_);
  if (stopping_) return;
  // A model serves when one of its versions is available and its engine makes progress.
  std::set<std::string> serving;
  for (const auto& m : state_.registry.available()) {
    if (m->engine->responsive(state_.limits.max_step_time)) serving.insert(m->name);
  }
  for (const std::string& name : state_.registry.names()) known_.insert(name);
  for (const std::string& name : known_) health->SetServingStatus(name, serving.count(name) > 0);
  const bool up = !serving.empty() && !state_.draining;
  health->SetServingStatus("", up);
  for (const GrpcServiceSpec& s : specs_)
    health->SetServingStatus(s.name, s.needs_model ? up : !state_.draining);
}

void GrpcServer::health_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, config_.health_interval);
    if (stopping_) break;
    lock.unlock();
    update_health();
    lock.lock();
  }
}

void GrpcServer::shutdown(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (health_.joinable()) health_.join();
  if (auto* health = impl_->server->GetHealthCheckService()) health->Shutdown();
  const auto left = deadline - std::chrono::steady_clock::now();
  grpc_handoff_release();
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(left));
  impl_->server->Wait();
  grpc_handoff_acquire();
}

}  // namespace tf
