#pragma once
// One generation request, typed, whichever door it came in by: OpenAI completions and chat (REST
// and batch files), the gRPC GenerationService, and each instance of TF Serving's Predict (REST
// and gRPC). Every door only reads its wire format into a CompletionRequest; what follows is one
// planner (planner.h) and one summary of the finished job (job_summary.h), so the same input
// gets the same answer through every door. Reading needs no model: what depends on one
// (encoding, the vocabulary, the context) is the planner's.
//
// A reader's errors are HttpError 400 naming the field (its wire name: chat's
// max_completion_tokens, Predict's input names).

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "sampling/sampling_params.h"
#include "serving/core/structured_output.h"

namespace tf {

// A prompt as sent: text for the model's tokenizer, or token ids used as they are.
struct PromptInput {
  bool is_text = false;
  std::string text;
  std::vector<int32_t> ids;
  bool operator==(const PromptInput&) const = default;
};

struct CompletionRequest {
  bool chat = false;
  // "name", "name:version" or "name@label"; empty: the default model. (Predict: from its path.)
  std::string model;
  std::string user;                   // the sticky key of a traffic split
  std::vector<PromptInput> prompts;   // completions and Predict (one per instance)
  std::vector<ChatMessage> messages;  // chat (content parts joined: only text parts are taken)
  bool add_generation_prompt = true;
  // More variables for the chat template (vLLM's chat_template_kwargs: Qwen3's enable_thinking).
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
  bool add_special_tokens = true;  // text prompts get BOS
  // Sampling as asked: max_tokens is meaningful only when max_tokens_given (else the planner's
  // default: 16 for completions, the room the context leaves for chat). Validated against the
  // vocabulary by the planner.
  SamplingParams params;
  bool max_tokens_given = false;
  std::string max_tokens_field = "max_tokens";  // the name the client gave it (errors name it)
  // max_tokens when none is given (0: 16 for completions, the context for chat); lowered to
  // the room the prompt leaves, as the defaults are (Ollama's num_predict).
  int32_t default_max_tokens = 0;
  // The most tokens a reasoning model may spend in its think block (vLLM's
  // thinking_token_budget, Anthropic's thinking.budget_tokens, OpenAI's reasoning_effort):
  // the block is closed for it when they are spent (SamplingParams::ThinkingBudget). Only for
  // chat through a template that writes think blocks; otherwise nothing to hold.
  std::optional<int32_t> thinking_budget;
  // A context smaller than the model's for this request (Ollama's num_ctx): the prompt and its
  // output must fit it; more than the model's is a 400 naming context_limit_field.
  std::optional<int64_t> context_limit;
  std::string context_limit_field = "num_ctx";
  bool stream = false, include_usage = false, echo = false;
  int32_t priority = 0;
  bool speculative = true;  // false: no speculative decoding for this request
  std::string cache_salt;
  // Structured output: what the output must follow (kind kNone: nothing). Compiled by the planner.
  OutputConstraint output;
  // Chat's tools: given to the template, the output parsed for calls, and with tool_choice
  // "required" or a named function, decoding constrained to calls.
  ToolRequest tools;
  std::optional<std::chrono::milliseconds> timeout;  // the request's own "timeout"
  // vLLM's prompt_logprobs: each prompt token's logprob with this many alternatives, in the
  // response's prompt_logprobs. (Completions' echo with logprobs asks for them too.)
  std::optional<int32_t> prompt_logprobs;
  // The prompt as the access log writes it (kept only when the access log takes prompts).
  std::string logged_prompt;
  bool operator==(const CompletionRequest&) const = default;
};

// The rules between fields, the same for every door: use_beam_search turns best_of (or n) into
// beams of which n are returned; best_of > n cannot stream; echo cannot take logprobs; the stop
// strings' limits.
void apply_request_rules(CompletionRequest& request, bool use_beam_search);

}  // namespace tf
