#include "serving/openai/openai_routes.h"

#include "serving/core/model_list.h"
#include "serving/openai/openai_api.h"
#include "serving/openai/rerank_api.h"
#include "serving/openai/responses_api.h"
#include "serving/openai/utility_api.h"

namespace tf {

void add_openai_routes(RouteTable& routes, ServingState& state) {
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
