#pragma once
// OpenAI's request bodies (/v1/completions, /v1/chat/completions, batch files) read into the
// typed request (core/completion_request.h): every field OpenAI and vLLM define, unknown ones
// refused by name; prompts in each of the shapes completions take; chat messages with their
// content parts and tool calls. A wrong type or range throws HttpError 400 naming the field.

#include <nlohmann/json.hpp>

#include <functional>
#include <vector>

#include "serving/core/completion_request.h"

namespace tf {

// An OpenAI completions (chat = false) or chat completions body: unknown fields, types, ranges,
// the prompt's shape, and the rules between fields (apply_request_rules). log_prompt: keep the
// prompt's text for the access log (logged_prompt).
// ordered_body: the body with its objects' members in the order sent (a JSON schema's properties
// are generated in that order); when absent, a schema's members come in sorted order.
CompletionRequest read_openai_request(
    const nlohmann::json& body, bool chat, bool log_prompt = false,
    const std::function<nlohmann::ordered_json()>& ordered_body = nullptr);

// The fields every OpenAI body shares (completions, chat, Responses): model, user, cache_salt,
// speculative, priority, timeout.
void read_request_options(const nlohmann::json& body, CompletionRequest& r);
// The chat fields the Responses API shares: chat_template_kwargs, and the think block's
// thinking_token_budget and reasoning_effort (as budgets: see docs/api.md).
void read_chat_options(const nlohmann::json& body, CompletionRequest& r);

// Every prompt of a completions body as sent: a string, a list of strings, a list of token ids,
// or a list of lists of token ids (none empty).
std::vector<PromptInput> read_completion_prompts(const nlohmann::json& body,
                                                 const char* field = "prompt");

// The messages of a chat body, checked: a non-empty list of objects with a string role and a
// string (or list of text parts) content.
std::vector<ChatMessage> read_chat_messages(const nlohmann::json& body);

}  // namespace tf
