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

#include "sampling/sampling_params.h"
#include "serving/generate_signature.h"
#include "serving/structured_output.h"
#include "serving/tool_calls.h"
#include "tokenizer/chat_template.h"

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

// An OpenAI completions (chat = false) or chat completions body: unknown fields, types, ranges,
// the prompt's shape, and the rules between fields (apply_request_rules). log_prompt: keep the
// prompt's text for the access log (logged_prompt).
// ordered_body: the body with its objects' members in the order sent (a JSON schema's properties
// are generated in that order); when absent, a schema's members come in sorted order.
CompletionRequest read_openai_request(
    const nlohmann::json& body, bool chat, bool log_prompt = false,
    const std::function<nlohmann::ordered_json()>& ordered_body = nullptr);

// The rules between fields, the same for every door: use_beam_search turns best_of (or n) into
// beams of which n are returned; best_of > n cannot stream; echo cannot take logprobs; the stop
// strings' limits.
void apply_request_rules(CompletionRequest& request, bool use_beam_search);

// TF Serving's Predict body: the row format ("instances") or the columnar one ("inputs"),
// written for one of two signatures. The generate signature (generate_signature.h: input_ids and
// attention_mask [batch, len], generate()'s settings) when the request holds an input only it
// has (attention_mask, max_new_tokens, do_sample, ...) or names a signature other than
// serving_default and tokenflow's; otherwise tokenflow's own, as before it: each prompt an
// instance with its parameters (OpenAI's names). An input of each kind in one request is a 400.
// The signature's name is checked against the model by the planner. TF Serving's messages.
struct PredictInput {
  bool rows = false;                         // answered as "predictions" (else "outputs")
  std::string signature_name;                // as the request names it ("" when it does not)
  std::optional<GenerateInput> generate;     // set: the generate signature
  std::vector<CompletionRequest> instances;  // tokenflow's signature
  std::string logged_prompt;
};
PredictInput read_predict_body(const nlohmann::json& body, bool log_prompt = false);
// The parameters a Predict instance may carry, under their OpenAI names.
bool is_predict_param(const std::string& name);

}  // namespace tf
