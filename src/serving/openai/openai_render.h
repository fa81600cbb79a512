#pragma once
// The response shapes of OpenAI's completions and chat completions as pure functions of what was
// asked (OpenAiShape) and what came out (the engine's outputs, a JobSummary): every byte of a
// whole response, a stream chunk, the chat role chunk and the usage chunk, testable without a
// server (tests/serving/openai_render_test.cc). openai_api.cc only sends what these return.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/output_stream.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "serving/core/job_summary.h"
#include "serving/core/prompt.h"
#include "tokenizer/tokenizer.h"

namespace tf {

using ojson = nlohmann::ordered_json;

struct OpenAiShape {
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  std::string model;  // the name the response carries
  int64_t created = 0;
  bool chat = false;
  bool logprobs = false;                 // the request asked for them
  int32_t choices_per_prompt = 1;        // n: choice index = prompt * n + sequence
  const Tokenizer* tokenizer = nullptr;  // logprob tokens as bytes (nullptr: ids as text)
  std::vector<std::string> echo;         // per prompt, completions with echo: its text
  // Chat: each choice's text split into reasoning_content (a template's think block), content
  // and tool calls (tools given), as the plan decided.
  ChatAnswerShape answer;
  // Prompt logprobs: completions with echo and logprobs list them before the output's; vLLM's
  // prompt_logprobs field (asked: set) lists them by id. first_prompt_token: per prompt, the
  // token that has none.
  bool prompt_logprobs_field = false;
  std::vector<int32_t> first_prompt_token;
};

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}.
ojson openai_usage(const JobSummary& summary);

// The whole response of a finished job: results are the job's sequences per prompt, summary
// picks the returned ones.
ojson openai_response(const OpenAiShape& shape,
                      const std::vector<std::vector<GeneratedSequence>>& results,
                      const JobSummary& summary);

// The chunk of one stream output of a prompt, or nullopt when it carries nothing to send (no
// text and no finish, or a beam beyond the returned ones). with_echo: prepend the prompt's
// text (the first chunk of each completions choice when the request echoes).
// finish_as: the finish_reason to show instead of out's ("tool_calls"); reasoning: chat's
// reasoning_content delta, before the content.
std::optional<ojson> openai_stream_chunk(const OpenAiShape& shape, size_t prompt,
                                         const RequestOutput& out, bool with_echo,
                                         const char* finish_as = nullptr,
                                         const std::string& reasoning = {});

// One chat choice's stream when the shape has tools or reasoning: the engine's outputs turned
// into the chunks to send, in order (reasoning and content deltas, then the tool calls and the
// finish).
class ChatChoiceStream {
 public:
  explicit ChatChoiceStream(const OpenAiShape& shape);
  std::vector<ojson> chunks(size_t prompt, const RequestOutput& out);

 private:
  const OpenAiShape* shape_;
  ChatOutputStream split_;
};
// A chat choice's tool calls as OpenAI streams them: per call, a chunk with its index, id, type
// and name (arguments ""), then one with its arguments.
std::vector<ojson> openai_tool_call_chunks(const OpenAiShape& shape, int64_t index,
                                           const std::vector<ToolCall>& calls);
// A chat choice's message ({"role", "content"}, with reasoning_content and tool_calls as the
// shape parses them); finish_as becomes "tool_calls" when calls were made and the output stopped.
ojson openai_chat_message(const OpenAiShape& shape, const std::string& text, FinishReason finish,
                          const char*& finish_as);
// A whole message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
ojson openai_tool_calls(const std::vector<ToolCall>& calls);
// The chunk that opens each chat choice: {"delta": {"role": "assistant", "content": ""}}.
ojson openai_role_chunk(const OpenAiShape& shape, int64_t index);
// The last chunk of a stream with include_usage: no choices, the usage.
ojson openai_usage_chunk(const OpenAiShape& shape, const JobSummary& summary);

// Logprobs in the completions shape ({"tokens", "token_logprobs", "top_logprobs",
// "text_offset"}, offsets from offset) and in the chat shape ({"content": [...], "refusal"}).
ojson completion_logprobs(const Tokenizer* tok, const std::vector<SampleResult>& lps,
                          size_t offset);
ojson chat_logprobs(const Tokenizer* tok, const std::vector<SampleResult>& lps);
// A prompt's logprobs in the completions shape, offsets from 0: the first token's entries null.
ojson completion_prompt_logprobs(const Tokenizer* tok, int32_t first_token,
                                 const std::vector<PromptLogprob>& lps);
// Completions' logprobs (a JSON null stays null) after a prompt's (echo with logprobs).
void prepend_logprobs(ojson& logprobs, const ojson& prompt_part);
// vLLM's prompt_logprobs: [null, {"id": {"logprob", "rank", "decoded_token"}, ...}, ...], each
// position's own token first, then its top alternatives.
ojson vllm_prompt_logprobs(const Tokenizer* tok, const std::vector<PromptLogprob>& lps);
// The prompt logprobs of a prompt's sequences (the one that carries them; empty: none).
const std::vector<PromptLogprob>& prompt_logprobs_of(const std::vector<GeneratedSequence>& seqs);

}  // namespace tf
