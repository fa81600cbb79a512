#pragma once
// The HTTP route table: each protocol registers its routes (method, path or path prefix, the
// handler, the shape its errors answer in), the server looks one up per request. A path claimed
// twice for one method is a startup error, not a silent override; a path with routes for other
// methods answers 405.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serving/core/api_common.h"
#include "serving/http/http_server.h"

namespace tf {

// One request on its route. rest: for a prefix route, the path after the prefix (as sent).
struct RouteCall {
  const HttpRequest& req;
  std::shared_ptr<HttpResponder> responder;
  std::shared_ptr<RequestRecord> record;
  std::string rest;
};
using RouteHandler = std::function<void(RouteCall&)>;

// The body of an error answered on a route, in its protocol's shape (status: http_status_of(e)).
using ErrorBody = std::function<std::string(const std::exception& e, int status)>;
// OpenAI's {"error": {"message", "type", "param", "code"}}: the shape of routes that name none.
std::string openai_error_shape(const std::exception& e, int status);

struct Route {
  std::string method;  // "GET", "POST"; "*" any
  std::string path;    // the whole path, or a prefix (prefix routes)
  bool prefix = false;
  RouteHandler handler;
  ErrorBody error_body;  // nullptr: OpenAI's shape
};

class RouteTable {
 public:
  // Throws Error when the method and path (or prefix) already have a route.
  void add(std::string method, std::string path, RouteHandler handler,
           ErrorBody error_body = nullptr);
  void add_prefix(std::string method, std::string prefix, RouteHandler handler,
                  ErrorBody error_body = nullptr);

  struct Match {
    const Route* route;
    std::string rest;
  };
  // A path's route: its exact routes first, then the longest prefix's. nullopt when no route
  // holds the path; HttpError 405 when routes hold it but none takes the method.
  std::optional<Match> find(const std::string& method, const std::string& path) const;
  // Every route, in the order added (for docs and tests).
  const std::vector<Route>& routes() const { return routes_; }

 private:
  void insert(Route r);
  std::vector<Route> routes_;
};

// Answers an error on a route: the status (http_status_of), Retry-After on 429 / 503,
// WWW-Authenticate on 401, the body in shape; logged (and counted) before it goes out.
void answer_route_error(const std::exception& e, const ErrorBody& shape, HttpResponder& responder,
                        const RequestRecord& record);

// %XX escapes of a path segment decoded (model names may hold '/' or ':' written as %2F, %3A).
std::string url_decode(const std::string& s);

}  // namespace tf
