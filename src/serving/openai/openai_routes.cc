#include "serving/openai/openai_routes.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/log.h"
#include "serving/core/api_common.h"
#include "serving/core/model_list.h"
#include "serving/openai/openai_api.h"
#include "serving/openai/rerank_api.h"
#include "serving/openai/responses_api.h"
#include "serving/openai/utility_api.h"

namespace tf {

namespace {

// vLLM's POST /v1/load_lora_adapter: {"lora_name", "lora_path"} (and tokenflow's
// "base_model_name", default the first model). Admin authority; the path under --model-root
// (an adapter directory is code-free, but its path names what the server reads); loaded for
// the base's serving version at once, so a bad adapter is refused here, naming why.
void handle_load_lora(ServingState& state, const HttpRequest& req, HttpResponder& responder,
                      RequestRecord& record) {
  state.require_admin(record);
  const nlohmann::json body = parse_json_body(req.body);
  for (auto it = body.begin(); it != body.end(); ++it)
    if (it.key() != "lora_name" && it.key() != "lora_path" && it.key() != "base_model_name" &&
        it.key() != "load_inplace")
      throw HttpError(400, fmt::format("unknown field '{}'", it.key()), "", it.key());
  LoraSpec spec{string_field(body, "lora_name"), string_field(body, "base_model_name"),
                string_field(body, "lora_path")};
  if (spec.name.empty()) throw HttpError(400, "'lora_name' is required", "", "lora_name");
  if (spec.path.empty()) throw HttpError(400, "'lora_path' is required", "", "lora_path");
  const std::vector<std::string> models = state.registry.names();
  if (spec.base.empty() && !models.empty()) spec.base = models.front();
  if (std::find(models.begin(), models.end(), spec.base) == models.end())
    throw HttpError(404, fmt::format("base model '{}' is not served", spec.base), "model_not_found",
                    "base_model_name");
  if (std::find(models.begin(), models.end(), spec.name) != models.end())
    throw HttpError(400, fmt::format("'{}' is the name of a model", spec.name), "", "lora_name");
  if (state.registry.loras().find(spec.name))
    throw HttpError(400, fmt::format("a LoRA adapter named '{}' is already loaded", spec.name), "",
                    "lora_name");
  if (!path_is_under(spec.path, state.model_roots))
    throw HttpError(403, "lora_path is not under a directory this server allows (--model-root)",
                    "path_not_allowed", "lora_path");
  auto model = state.registry.resolve(state.registry.parse_model_field(spec.base));
  if (!model)
    throw HttpError(404, fmt::format("base model '{}' is not available", spec.base),
                    "model_not_found", "base_model_name");
  try {
    (void)model->lora(spec.path);
  } catch (const Error& e) {
    throw HttpError(400, fmt::format("LoRA adapter '{}': {}", spec.name, e.what()), "",
                    "lora_path");
  }
  try {
    state.registry.loras().add(spec);
  } catch (const Error& e) {  // another load of the same name won the race
    throw HttpError(400, e.what(), "", "lora_name");
  }
  log::info("LoRA adapter '{}' of '{}' loaded from {}", spec.name, spec.base, spec.path);
  responder.send(200, fmt::format("Success: LoRA adapter '{}' added successfully.", spec.name),
                 "text/plain; charset=utf-8");
  log_request(record, 200);
}

// vLLM's POST /v1/unload_lora_adapter: {"lora_name"}; 404 for an adapter not loaded. Requests
// naming it are 404 from now on; its memory goes when the last running one ends.
void handle_unload_lora(ServingState& state, const HttpRequest& req, HttpResponder& responder,
                        RequestRecord& record) {
  state.require_admin(record);
  const nlohmann::json body = parse_json_body(req.body);
  const std::string name = string_field(body, "lora_name");
  if (name.empty()) throw HttpError(400, "'lora_name' is required", "", "lora_name");
  const std::optional<LoraSpec> spec = state.registry.loras().find(name);
  if (!spec || !state.registry.loras().remove(name))
    throw HttpError(404, fmt::format("no LoRA adapter named '{}' is loaded", name),
                    "model_not_found", "lora_name");
  for (const auto& m : state.registry.available())
    if (m->name == spec->base) m->drop_lora(spec->path);
  log::info("LoRA adapter '{}' unloaded", name);
  responder.send(200, fmt::format("Success: LoRA adapter '{}' removed successfully.", name),
                 "text/plain; charset=utf-8");
  log_request(record, 200);
}

}  // namespace

void add_openai_routes(RouteTable& routes, ServingState& state) {
  routes.add("POST", "/v1/load_lora_adapter",
             [&state](RouteCall& c) { handle_load_lora(state, c.req, *c.responder, *c.record); });
  routes.add("POST", "/v1/unload_lora_adapter",
             [&state](RouteCall& c) { handle_unload_lora(state, c.req, *c.responder, *c.record); });
  for (bool chat : {false, true}) {
    routes.add("POST", chat ? "/v1/chat/completions" : "/v1/completions",
               [&state, chat](RouteCall& c) {
                 handle_openai_generation(state, c.req, c.responder, c.record, chat);
               });
  }
  routes.add("POST", "/v1/responses",
             [&state](RouteCall& c) { handle_responses(state, c.req, c.responder, c.record); });
  routes.add_prefix("*", "/v1/responses/", [](RouteCall&) {
    throw HttpError(404,
                    "this server stores no responses (it answers /v1/responses statelessly): "
                    "nothing to retrieve, cancel or delete",
                    "not_found");
  });
  for (const char* path : {"/tokenize", "/v1/tokenize"}) {
    routes.add("POST", path,
               [&state](RouteCall& c) { handle_tokenize(state, c.req, c.responder, *c.record); });
  }
  for (const char* path : {"/detokenize", "/v1/detokenize"}) {
    routes.add("POST", path,
               [&state](RouteCall& c) { handle_detokenize(state, c.req, c.responder, *c.record); });
  }
  routes.add("POST", "/v1/embeddings",
             [&state](RouteCall& c) { handle_embeddings(state, c.req, c.responder, c.record); });
  for (const char* path : {"/v1/rerank", "/rerank", "/v2/rerank"}) {
    routes.add("POST", path,
               [&state](RouteCall& c) { handle_rerank(state, c.req, c.responder, c.record); });
  }
  for (const char* path : {"/score", "/v1/score"}) {
    routes.add("POST", path,
               [&state](RouteCall& c) { handle_score(state, c.req, c.responder, c.record); });
  }
  for (const char* path : {"/classify", "/v1/classify"}) {
    routes.add("POST", path,
               [&state](RouteCall& c) { handle_classify(state, c.req, c.responder, c.record); });
  }
  for (const char* path : {"/v1/models", "/v1/models/"}) {
    routes.add("GET", path, [&state](RouteCall& c) {
      c.responder->send(200, dump_json(model_list_json(state, c.record->key)));
      log_request(*c.record, 200);
    });
  }
}

}  // namespace tf
