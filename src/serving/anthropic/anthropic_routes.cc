#include "serving/anthropic/anthropic_routes.h"

#include "serving/anthropic/anthropic_api.h"

namespace tf {

void add_anthropic_routes(RouteTable& routes, ServingState& state) {
  const ErrorBody shape = [](const std::exception& e, int status) {
    return anthropic_error_body(status, e.what());
  };
  routes.add(
      "POST", "/v1/messages",
      [&state](RouteCall& c) { handle_messages(state, c.req, c.responder, c.record); }, shape);
  routes.add(
      "POST", "/v1/messages/count_tokens",
      [&state](RouteCall& c) { handle_count_tokens(state, c.req, c.responder, *c.record); }, shape);
}

}  // namespace tf
