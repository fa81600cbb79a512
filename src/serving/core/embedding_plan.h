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
#include "serving/models/model_tasks.h"

namespace tf {

// How an input longer than a model takes is cut: not at all (a 400 naming the limit), to its
// first tokens (truncate: true; Ollama's and TEI's truncate), or to its last k
// (truncate_prompt_tokens: k, vLLM's; -1: the model's limit).
struct InputTruncation {
  bool first = false;
  std::optional<int64_t> keep_last;
};
// vLLM's truncate_prompt_tokens from body (absent: unset): -1 or a positive count, else a 400.
std::optional<int64_t> truncate_prompt_tokens_of(const nlohmann::json& body);

struct EmbeddingInputs {
  std::vector<PromptInput> inputs;
  // Unset: the model's (an encoder's from its files, else CLS; a decoder's last token).
  std::optional<Pooling> pooling;
  bool add_special_tokens = true;
  // An input longer than the context: cut to its first tokens (Ollama's truncate) instead of
  // refused with context_length_exceeded.
  bool truncate = false;
  std::optional<int64_t> truncate_prompt_tokens;  // vLLM's: keep the last k tokens (-1: limit)
  // Matryoshka: the first `dimensions` of each embedding (normalized after when asked);
  // refused unless the model's config declares it (matryoshka_dimensions / is_matryoshka).
  std::optional<int64_t> dimensions;
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

// A query and document (or text_1 and text_2) as the model scores them: an encoder's pair
// template with token types ([CLS] a [SEP] b [SEP]); a generator serving as a reranker, its
// reranker prompt (Qwen3-Reranker's: the system's yes/no question, "<Instruct>: instruction
// <Query>: a <Document>: b", the assistant's empty think block), unless a already starts with
// the chat's "<|im_start|>" (formatted by the client, as vLLM's examples do): then a + b.
ScoreInput score_pair_input(const ServedModel& m, const std::string& a, const std::string& b,
                            const std::string& instruction);

// The plan of scores, one request per input (ids from id, "id-i"): an encoder's classifier
// scores, or a reranking generator's score tokens' logits. HttpError 400 naming `field` for a
// model that does not serve `task` (score or classify) or an input past the context (cut to
// it with truncate: its first tokens; truncate_prompt_tokens k > 0: its last k).
std::shared_ptr<GenerationPlan> plan_scores(ServingState& state, std::shared_ptr<ServedModel> model,
                                            ModelTask task, std::vector<ScoreInput> inputs,
                                            const InputTruncation& truncation, const char* field,
                                            RequestRecord& record, const std::string& id);

// A classifier's probabilities: the softmax over its labels (the sigmoid for a single one).
std::vector<float> label_probabilities(const std::vector<float>& scores);
// A pair's relevance in [0, 1] from a classifier's scores: sigmoid of a single logit (as
// sentence-transformers' CrossEncoder and vLLM do for one label), else the softmax probability
// of the last label.
float relevance_of(const std::vector<float>& scores);

// e scaled to unit length (unchanged when it is all zeros).
void normalize_embedding(std::vector<float>& e);

// A request's `dimensions` checked against m: its hidden size, or (a Matryoshka model: config's
// matryoshka_dimensions, or is_matryoshka) one it declares; else HttpError 400 naming field.
// Returns the count to cut to (unset: the whole vector).
std::optional<int64_t> checked_dimensions(const ServedModel& m, std::optional<int64_t> d,
                                          const char* field = "dimensions");
// An embedding as a door answers it: its first dims values (when set), then scaled to unit
// length when normalize.
void shape_embedding(std::vector<float>& e, std::optional<int64_t> dims, bool normalize);

}  // namespace tf
