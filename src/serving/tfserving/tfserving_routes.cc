#include "serving/tfserving/tfserving_routes.h"

#include <fmt/format.h>

#include "serving/core/model_list.h"
#include "serving/tfserving/tfserving_api.h"

namespace tf {

std::string tfserving_error_shape(const std::exception& e, int status) {
  return tfserving_error_body(status == 500 ? fmt::format("internal error: {}", e.what())
                                            : std::string(e.what()));
}

void add_tfserving_routes(RouteTable& routes, ServingState& state) {
  routes.add_prefix("*", "/v1/models/", [&state](RouteCall& c) {
    const HttpRequest& req = c.req;
    const std::string rest = url_decode(c.rest);
    // OpenAI's "retrieve model" for ids TF Serving paths cannot hold ("name:3", "name@stable")
    // or that are not TF Serving paths at all ("org/model").
    auto openai_retrieve = [&] {
      if (req.method != "GET" || rest.empty()) return false;
      const ModelRequestSpec spec = state.registry.parse_model_field(rest);
      state.require_model_access(*c.record, spec.name);
      // A fixed sticky key: a model with a traffic split answers the same version every time.
      auto m = state.registry.resolve(spec, "listing");
      if (!m) {
        // "name:3" and "name@label" are model ids, not TF Serving verbs: nothing answers them.
        const size_t colon = rest.rfind(':');
        const bool version = colon != std::string::npos && colon + 1 < rest.size() &&
                             rest.find_first_not_of("0123456789", colon + 1) == std::string::npos;
        if (version || rest.find('@') != std::string::npos)
          throw HttpError(404, state.registry.unavailable_reason(spec), "model_not_found", "model");
        return false;
      }
      c.responder->send(200,
                        dump_json(model_object_json(*m, rest, rest == spec.name ? "" : spec.name)));
      log_request(*c.record, 200);
      return true;
    };
    if (rest.find_first_of(":@") != std::string::npos && req.method == "GET" && openai_retrieve())
      return;
    // TF Serving's paths answer errors in TF Serving's shape ({"error": "..."}).
    auto tf_serving = [&](auto fn) {
      try {
        fn();
      } catch (const std::exception& e) {
        answer_route_error(e, tfserving_error_shape, *c.responder, *c.record);
      }
    };
    if (auto mp = parse_model_path(rest)) {
      tf_serving([&] { handle_tfserving(state, *mp, req, c.responder, c.record); });
      return;
    }
    if (openai_retrieve()) return;
    tf_serving([&] {
      throw HttpError(404, fmt::format("Malformed request: {} {}", req.method, req.path));
    });
  });
}

}  // namespace tf
