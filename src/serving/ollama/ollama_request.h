#pragma once
// Ollama's API bodies read into the typed request (core/completion_request.h), as Ollama's
// clients (the `ollama` libraries, Open WebUI, IDE plugins) send them: /api/chat (messages with
// system / user / assistant / tool roles, an assistant's tool_calls, a tool's tool_name; tools
// in OpenAI's function shape), /api/generate (prompt, system, raw; a non-raw prompt is rendered
// through the chat template as one user turn), `format` ("json" or a JSON schema), `think`
// (true / false or "low" / "medium" / "high"), `stream` (true unless false), `keep_alive`
// (accepted: tokenflow keeps the models its config names loaded), and `options` mapped onto
// the sampling parameters: num_predict (-1 and -2: up to the context), temperature, top_k,
// top_p, min_p, typical_p, repeat_penalty, presence_penalty, frequency_penalty, seed (-1:
// random), stop, num_ctx (at most the model's context); logprobs with top_logprobs. Ollama's runner
// options (num_gpu, num_thread, num_batch, use_mmap, ...) are accepted and have no effect; options
// tokenflow cannot honour (mirostat, a repeat_last_n window, images, suffix, Go templates) are
// refused by name. An unknown field or option, a wrong type or range: HttpError 400 naming it.
//
// Model names as Ollama clients write them, name:tag: "name" and "name:latest" the model's
// default version, "name:7" version 7, "name:stable" the version labelled stable.

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>

#include "serving/core/completion_request.h"
#include "serving/core/embedding_plan.h"

namespace tf {

struct OllamaRequest {
  CompletionRequest request;
  // An empty prompt (or no messages): Ollama's "load the model" call; nothing is generated.
  bool load_only = false;
  bool raw = false;  // /api/generate's raw prompt (no template)
};

OllamaRequest read_ollama_chat(const nlohmann::json& body, const nlohmann::ordered_json& ordered,
                               bool log_prompt);
OllamaRequest read_ollama_generate(const nlohmann::json& body,
                                   const nlohmann::ordered_json& ordered, bool log_prompt);

// /api/embed ({model, input: a string or strings, truncate, options, keep_alive, dimensions})
// and the older /api/embeddings ({model, prompt}: one vector, not normalized).
struct OllamaEmbedRequest {
  std::string model;
  EmbeddingInputs inputs;
  std::optional<int64_t> dimensions;
  bool legacy = false;  // /api/embeddings
};
OllamaEmbedRequest read_ollama_embed(const nlohmann::json& body, bool legacy);

// The model field as tokenflow's registry reads it ("name", "name:version", "name@label"):
// name:tag with tag "latest" is the name, a number the version, a label of the model
// (has_label(name, tag)) that label; anything else is left as sent (and not found).
std::string ollama_model_field(
    const std::string& name,
    const std::function<bool(const std::string& model, const std::string& label)>& has_label);

}  // namespace tf
