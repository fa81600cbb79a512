#include "serving/http/server.h"

#include <fmt/format.h>

#include <map>

#include "core/log.h"
#include "core/memory.h"
#include "serving/core/api_common.h"
#include "serving/http/admin_routes.h"
#include "serving/http/web_assets.h"

namespace tf {

Server::Server(ServingState& state, HttpServerConfig config)
    : state_(state),
      http_(
          std::move(config),
          [this](HttpRequest req, std::shared_ptr<HttpResponder> r) {
            handle(std::move(req), std::move(r));
          },
          [](int status, std::string message) {
            return std::pair<std::string, std::string>{openai_error_body(status, message),
                                                       "application/json"};
          }) {
  add_admin_routes(routes_, state_,
                   {[this] { return static_cast<int64_t>(http_.open_connections()); },
                    [this] { return slow_reader_streams(); }});
}

bool Server::shutdown(std::chrono::milliseconds grace) {
  state_.draining = true;
  http_.stop_accepting();
  const bool clean = http_.drain(std::chrono::steady_clock::now() + grace);
  if (!clean) {
    log::warn("shutdown: {} responses still in progress after {} ms; closing them",
              http_.responses_in_progress(), grace.count());
  }
  http_.stop();
  return clean;
}

void Server::handle(HttpRequest req, std::shared_ptr<HttpResponder> responder) {
  auto record = std::make_shared<RequestRecord>();
  const std::string* given = req.header("x-request-id");
  record->id = request_id(given);
  record->method = req.method;
  record->path = req.path;
  record->remote = req.remote;
  record->received = req.received;
  responder->add_header("X-Request-Id", record->id);
  // Probes and scrapes are not requests of the service.
  if (!is_metrics_path(req.path) && req.path != "/healthz" && req.path != "/readyz") {
    // The playground's files are logged, not counted as requests of the service.
    if (!(state_.playground && find_web_asset(req.path))) record->metrics = &state_.metrics;
    record->access_log = state_.access_log.get();
  }
  // A POST carries a body to parse and, for generation, a prompt to tokenize: work that grows
  // with the request, done on the preparation pool under a token that the client's departure
  // and the server's time limit cancel (the request's own timeout tightens it there). GETs are
  // answered here, on the I/O thread.
  if (req.method == "POST") {
    auto token = std::make_shared<CancelToken>();
    token->limit_deadline(record->received + state_.limits.max_request_time);
    responder->on_disconnect([token] { token->cancel(); });
    state_.prepare_pool.run(
        token, [this, req = std::move(req), responder, record] { serve(req, responder, record); });
    return;
  }
  serve(req, responder, record);
}

void Server::serve(const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
                   std::shared_ptr<RequestRecord> record) {
  try {
    authenticate(req, *record);
    route(req, responder, record);
  } catch (const std::exception& e) {
    answer_route_error(e, nullptr, *responder, *record);
  }
}

void Server::authenticate(const HttpRequest& req, RequestRecord& record) const {
  if (!state_.api_keys) return;
  const std::string& p = req.path;
  if (p == "/healthz" || p == "/readyz" || (is_metrics_path(p) && !state_.metrics_need_key)) return;
  // The playground's page and files hold no data: the page asks for a key and sends it with
  // every API request it makes.
  if (state_.playground && req.method == "GET" && find_web_asset(p)) return;
  // Authorization: Bearer KEY, or x-api-key: KEY as Anthropic's clients send it.
  const std::string* auth = req.header("authorization");
  std::string bearer;
  if (!auth) {
    if (const std::string* key = req.header("x-api-key")) {
      bearer = "Bearer " + *key;
      auth = &bearer;
    }
  }
  record.key = state_.authenticate(auth);
}

void Server::route(const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
                   std::shared_ptr<RequestRecord> record) {
  const std::string& p = req.path;
  if (state_.playground && req.method == "GET") {
    if (const WebAsset* asset = find_web_asset(p)) {
      // Only the page's own files may run or load; it talks to this origin only, and no
      // other site may frame it.
      responder->send(200, std::string(asset->body), std::string(asset->content_type),
                      {{"Content-Security-Policy",
                        "default-src 'none'; script-src 'self'; style-src 'self'; "
                        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                        "form-action 'none'; frame-ancestors 'none'"},
                       {"X-Content-Type-Options", "nosniff"},
                       {"X-Frame-Options", "DENY"},
                       {"Referrer-Policy", "no-referrer"},
                       {"Cache-Control", "no-cache"}});
      log_request(*record, 200);
      return;
    }
  }
  const auto match = routes_.find(req.method, p);
  if (!match) throw HttpError(404, fmt::format("no route for {} {}", req.method, p), "not_found");
  RouteCall call{req, responder, record, match->rest};
  try {
    match->route->handler(call);
  } catch (const std::exception& e) {
    answer_route_error(e, match->route->error_body, *responder, *record);
  }
}

}  // namespace tf
