#pragma once
// From a typed request (completion_request.h) to what the engine runs, one way for every door:
// plan_request is the pure, model-bound part (the parameters against the vocabulary, prompts
// encoded or chat rendered and held against the context, max_tokens fitted, one engine request
// per prompt), shared by batch files and Predict (tfserving/predict_plan.h); plan_generation adds
// the server's part (the model resolved, the deadline, the server's limits and the API key's
// admission).

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_format.h"
#include "chat/output_stream.h"
#include "engine/engine_request.h"
#include "serving/core/completion_request.h"
#include "serving/core/job_lifecycle.h"
#include "serving/core/job_summary.h"
#include "serving/core/serving_state.h"

namespace tf {

// A generation request checked and ready to run (JobPlan: the engine requests, one per prompt
// with limits and deadline applied, the version, the return rule, the admission, the deadline).
struct GenerationPlan : JobPlan {
  std::vector<std::vector<int32_t>> prompts;
  std::shared_ptr<const LoraAdapter> lora;  // the adapter the request named, if any
  std::string name;  // what answers name as their model: the model's, or the adapter's
  SamplingParams params;
  bool stream = false, include_usage = false, echo = false;
  std::optional<int32_t> prompt_logprobs;  // vLLM's field, as asked (rendered as its own list)
  int32_t choices_per_prompt = 1;          // n (after best_of or beam search pick theirs)
  bool max_tokens_given = false;
  // Chat with tools (tool_choice not "none"): the output is parsed for calls in tool_format.
  std::shared_ptr<const ToolRequest> tools;
  ToolFormat tool_format = ToolFormat::kJson;
  // Chat through a template that writes think blocks: the answer's reasoning is split off
  // (thinking_opened: the rendered prompt left the block open).
  bool reasoning = false, thinking_opened = false;
  // The four above, as every chat door splits its answers (chat/output_stream.h).
  ChatAnswerShape answer_shape() const { return {reasoning, thinking_opened, tools, tool_format}; }
};

// The model-bound part of planning (no server state): HttpError 400 naming the field for what
// the model cannot take. Engine requests get ids from id ("id-i" with several prompts).
// default_max_tokens: where the request gives none (0: OpenAI's 16 for completions, the
// context for chat); either way lowered to the room the prompt leaves.
// grammar_vocab: the model's vocabulary for a request's grammar (ModelInstance::grammar_vocab,
// kept per model); without one it is built from the tokenizer for this request. chat: the
// model's chat format (ServedModel::chat, built at load); without one, built for this request.
GenerationPlan plan_request(
    const CompletionRequest& request, const LoadedTokenizer& tokenizer, const ModelConfig& config,
    const std::string& id, int32_t default_max_tokens = 0,
    const std::function<std::shared_ptr<const GrammarVocab>()>& grammar_vocab = nullptr,
    std::shared_ptr<const ChatFormat> chat = nullptr);

// The version a request's model field names ("" the default; user and header: the sticky keys
// of a traffic split). Every door resolves its model here or in resolve_servable, and both
// check the request's API key first: 403 for a model the key may not use, whether or not it
// exists (a key learns nothing of other models), before anything model-specific of the
// request is decoded. HttpError 404 when none.
// A LoRA adapter's name (ServingState::loras), or BASE@ADAPTER where ADAPTER is not a version
// label of BASE, resolves to its base model, the adapter (loaded
// for that version on first use) in *lora; where lora is nullptr (a route that does not
// generate) an adapter's name is a 400. base_version / base_label: which version of the base an
// adapter runs on (TF Serving's paths name one), else the one its base's name resolves to.
std::shared_ptr<ServedModel> resolve_model(ServingState& state, const RequestRecord& record,
                                           const std::string& model, const std::string& user,
                                           const ModelRegistry::HeaderFn& header,
                                           std::shared_ptr<const LoraAdapter>* lora = nullptr,
                                           std::optional<int64_t> base_version = std::nullopt,
                                           std::optional<std::string> base_label = std::nullopt);

// Resolves the request's model (header: the sticky header lookup of a traffic split; 404 when
// none), plans it, and applies the server's rules (ServingState::prepare). Fills record's
// model, version, prompt tokens (and prompt, when the access log takes prompts). time_limit:
// the caller's limit (a gRPC deadline) when the request has no timeout of its own. Throws
// HttpError for what it rejects; nothing has run then.
GenerationPlan plan_generation(ServingState& state, const CompletionRequest& request,
                               const ModelRegistry::HeaderFn& header, RequestRecord& record,
                               const std::string& id,
                               std::optional<std::chrono::milliseconds> time_limit = std::nullopt);

}  // namespace tf
