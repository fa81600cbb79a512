#pragma once
// Embedding requests, whichever door they came in by (OpenAI's /v1/embeddings, Ollama's
// /api/embed and /api/embeddings): each input encoded (or taken as token ids), checked against
// the vocabulary and the context (or cut to it), and planned as one engine request that
// generates nothing and returns the prompt's pooled final hidden state. The door renders the
// vectors; normalize_embedding scales one to unit length.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_request.h"
#include "serving/core/api_common.h"
#include "serving/core/completion_request.h"
#include "serving/core/planner.h"
#include "serving/core/serving_state.h"

namespace tf {

struct EmbeddingInputs {
  std::vector<PromptInput> inputs;
  // Unset: the model's (an encoder's from its files, else CLS; a decoder's last token).
  std::optional<Pooling> pooling;
  bool add_special_tokens = true;
  // An input longer than the context: cut to its first tokens (Ollama's truncate) instead of
  // refused with context_length_exceeded.
  bool truncate = false;
  std::string field = "input";  // the body's field, for errors
};

// The plan of model's embeddings (ids from id, "id-i" with several inputs), admitted by the
// server's rules (ServingState::prepare); record gets the prompt tokens. HttpError 400 naming
// in.field for an empty text, a token id outside the vocabulary or an input past the context.
std::shared_ptr<GenerationPlan> plan_embeddings(ServingState& state,
                                                std::shared_ptr<ServedModel> model,
                                                const EmbeddingInputs& in, RequestRecord& record,
                                                const std::string& id);

// A cross-encoder's or classifier's inputs: token ids and their types (empty: all 0).
struct ScoreInput {
  std::vector<int32_t> ids, types;
};

// The plan of an encoder's classifier scores, one request per input (ids from id, "id-i");
// HttpError 400 naming `field` for a model without a classifier (a generator, or an encoder
// that only embeds) or an input past the context (cut to it with truncate).
std::shared_ptr<GenerationPlan> plan_scores(ServingState& state, std::shared_ptr<ServedModel> model,
                                            std::vector<ScoreInput> inputs, bool truncate,
                                            const char* field, RequestRecord& record,
                                            const std::string& id);

// A classifier's probabilities: the softmax over its labels (the sigmoid for a single one).
std::vector<float> label_probabilities(const std::vector<float>& scores);
// A pair's relevance in [0, 1] from a classifier's scores: sigmoid of a single logit (as
// sentence-transformers' CrossEncoder and vLLM do for one label), else the softmax probability
// of the last label.
float relevance_of(const std::vector<float>& scores);

// e scaled to unit length (unchanged when it is all zeros).
void normalize_embedding(std::vector<float>& e);

}  // namespace tf
