#include "serving/http/routes.h"

#include <fmt/format.h>

#include <cctype>

#include "core/error.h"
#include "core/log.h"

namespace tf {

std::string openai_error_shape(const std::exception& e, int) {
  return openai_error_body(e);
}

void RouteTable::insert(Route r) {
  for (const Route& o : routes_) {
    if (o.path == r.path && o.prefix == r.prefix &&
        (o.method == r.method || o.method == "*" || r.method == "*"))
      fail(ErrorKind::kInternal, "two routes for {} {}{}", r.method, r.path, r.prefix ? "*" : "");
  }
  routes_.push_back(std::move(r));
}

void RouteTable::add(std::string method, std::string path, RouteHandler handler,
                     ErrorBody error_body) {
  insert({std::move(method), std::move(path), false, std::move(handler), std::move(error_body)});
}

void RouteTable::add_prefix(std::string method, std::string prefix, RouteHandler handler,
                            ErrorBody error_body) {
  insert({std::move(method), std::move(prefix), true, std::move(handler), std::move(error_body)});
}

std::optional<RouteTable::Match> RouteTable::find(const std::string& method,
                                                  const std::string& path) const {
  // The routes that hold the path: exact ones, else those of the longest prefix.
  std::vector<const Route*> held;
  for (const Route& r : routes_)
    if (!r.prefix && r.path == path) held.push_back(&r);
  size_t prefix_len = 0;
  if (held.empty()) {
    for (const Route& r : routes_) {
      if (!r.prefix || !path.starts_with(r.path) || r.path.size() < prefix_len) continue;
      if (r.path.size() > prefix_len) held.clear();
      prefix_len = r.path.size();
      held.push_back(&r);
    }
  }
  if (held.empty()) return std::nullopt;
  for (const Route* r : held) {
    if (r->method == "*" || r->method == method)
      return Match{r, r->prefix ? path.substr(r->path.size()) : std::string()};
  }
  std::string methods;
  for (const Route* r : held) methods += (methods.empty() ? "" : " or ") + r->method;
  throw HttpError(405, fmt::format("{} takes {} requests", path, methods), "method_not_allowed");
}

void answer_route_error(const std::exception& e, const ErrorBody& shape, HttpResponder& responder,
                        const RequestRecord& record) {
  const int status = http_status_of(e);
  if (status >= 500 && status != 504) log::error("request {} failed: {}", record.id, e.what());
  HttpHeaders headers;
  if (status == 503 || status == 429) {
    const auto* he = dynamic_cast<const HttpError*>(&e);
    const int retry = he && he->retry_after_seconds() > 0 ? he->retry_after_seconds() : 1;
    headers.emplace_back("Retry-After", std::to_string(retry));
  }
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  const std::string body = shape ? shape(e, status) : openai_error_shape(e, status);
  // Counted and logged before the answer goes out: this may run off the connection's strand (on
  // the preparation pool), and a client that has its answer may already read the metrics.
  log_request(record, status);
  responder.send(status, body, "application/json", std::move(headers));
}

std::string url_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace tf
