#include "serving/ollama/ollama_routes.h"

#include "serving/ollama/ollama_api.h"

namespace tf {

void add_ollama_routes(RouteTable& routes, ServingState& state) {
  const ErrorBody shape = [](const std::exception& e, int) { return ollama_error_body(e.what()); };
  routes.add(
      "POST", "/api/chat",
      [&state](RouteCall& c) { handle_ollama_chat(state, c.req, c.responder, c.record); }, shape);
  routes.add(
      "POST", "/api/generate",
      [&state](RouteCall& c) { handle_ollama_generate(state, c.req, c.responder, c.record); },
      shape);
  for (bool legacy : {false, true}) {
    routes.add(
        "POST", legacy ? "/api/embeddings" : "/api/embed",
        [&state, legacy](RouteCall& c) {
          handle_ollama_embed(state, c.req, c.responder, c.record, legacy);
        },
        shape);
  }
  for (bool running : {false, true}) {
    routes.add(
        "GET", running ? "/api/ps" : "/api/tags",
        [&state, running](RouteCall& c) {
          handle_ollama_tags(state, c.responder, *c.record, running);
        },
        shape);
  }
  routes.add(
      "POST", "/api/show",
      [&state](RouteCall& c) { handle_ollama_show(state, c.req, c.responder, *c.record); }, shape);
  routes.add(
      "GET", "/api/version",
      [](RouteCall& c) {
        log_request(*c.record, 200);
        c.responder->send(200, dump_json(nlohmann::json{{"version", kOllamaApiVersion}}));
      },
      shape);
  for (const char* path : {"/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete"}) {
    routes.add(
        "*", path,
        [path](RouteCall&) {
          throw HttpError(501, std::string(path) +
                                   " is not supported: tokenflow serves the models its "
                                   "configuration names (--model, --model_config_file); see "
                                   "docs/models.md");
        },
        shape);
  }
  routes.add_prefix(
      "*", "/api/blobs/",
      [](RouteCall&) {
        throw HttpError(501, "/api/blobs is not supported: tokenflow stores no model blobs");
      },
      shape);
}

}  // namespace tf
