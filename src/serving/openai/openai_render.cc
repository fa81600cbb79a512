#include "serving/openai/openai_render.h"

#include "sampling/sequence_sampler.h"

namespace tf {
namespace {

using json = nlohmann::json;

json finish_json(FinishReason f) {
  if (f == FinishReason::kNone) return nullptr;
  return finish_reason_name(f);
}

}  // namespace

// Completions shape: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
ojson completion_logprobs(const Tokenizer* tok, const std::vector<SampleResult>& lps,
                          size_t offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  for (const auto& r : lps) {
    const std::string t = token_bytes(tok, r.token);
    tokens.push_back(t);
    token_lps.push_back(r.logprob);
    json top = json::object();
    for (const auto& alt : r.top) top[token_bytes(tok, alt.token)] = alt.logprob;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

// Chat shape: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal"}.
ojson chat_logprobs(const Tokenizer* tok, const std::vector<SampleResult>& lps) {
  return {{"content", token_logprobs_json(tok, lps)}, {"refusal", nullptr}};
}

ojson completion_prompt_logprobs(const Tokenizer* tok, int32_t first_token,
                                 const std::vector<PromptLogprob>& lps) {
  std::vector<SampleResult> samples;
  samples.reserve(lps.size());
  for (const auto& lp : lps) samples.push_back(lp.sample);
  ojson out = completion_logprobs(tok, samples, token_bytes(tok, first_token).size());
  out["tokens"].insert(out["tokens"].begin(), token_bytes(tok, first_token));
  out["token_logprobs"].insert(out["token_logprobs"].begin(), nullptr);
  out["top_logprobs"].insert(out["top_logprobs"].begin(), nullptr);
  out["text_offset"].insert(out["text_offset"].begin(), 0);
  return out;
}

void prepend_logprobs(ojson& logprobs, const ojson& prompt_part) {
  if (!logprobs.is_object()) return;
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    logprobs[k].insert(logprobs[k].begin(), prompt_part[k].begin(), prompt_part[k].end());
}

ojson vllm_prompt_logprobs(const Tokenizer* tok, const std::vector<PromptLogprob>& lps) {
  ojson out = ojson::array({nullptr});
  for (const auto& lp : lps) {
    ojson pos = ojson::object();
    pos[std::to_string(lp.sample.token)] = {{"logprob", lp.sample.logprob},
                                            {"rank", lp.rank},
                                            {"decoded_token", token_bytes(tok, lp.sample.token)}};
    for (size_t i = 0; i < lp.sample.top.size(); ++i) {
      const TokenLogprob& alt = lp.sample.top[i];
      const std::string id = std::to_string(alt.token);
      if (pos.contains(id)) continue;
      pos[id] = {{"logprob", alt.logprob},
                 {"rank", static_cast<int64_t>(i) + 1},
                 {"decoded_token", token_bytes(tok, alt.token)}};
    }
    out.push_back(std::move(pos));
  }
  return out;
}

const std::vector<PromptLogprob>& prompt_logprobs_of(const std::vector<GeneratedSequence>& seqs) {
  static const std::vector<PromptLogprob> kNone;
  for (const auto& s : seqs)
    if (!s.prompt_logprobs.empty()) return s.prompt_logprobs;
  return kNone;
}

ojson openai_usage(const JobSummary& s) {
  return ojson{{"prompt_tokens", s.prompt_tokens},
               {"completion_tokens", s.completion_tokens},
               {"total_tokens", s.prompt_tokens + s.completion_tokens},
               {"prompt_tokens_details", {{"cached_tokens", s.cached_prompt_tokens}}}};
}

ojson openai_chat_message(const OpenAiShape& shape, const std::string& text, FinishReason finish,
                          const char*& finish_as) {
  if (!shape.answer.tools && !shape.answer.reasoning)
    return {{"role", "assistant"}, {"content", text}};
  const ChatAnswerShape::Whole w = shape.answer.split(text);
  ojson m = {{"role", "assistant"}, {"content", w.content ? ojson(*w.content) : ojson()}};
  if (w.reasoning) m["reasoning_content"] = *w.reasoning;
  if (!w.calls.empty()) {
    m["tool_calls"] = openai_tool_calls(w.calls);
    if (finish == FinishReason::kStop) finish_as = "tool_calls";
  }
  return m;
}

ojson openai_response(const OpenAiShape& shape,
                      const std::vector<std::vector<GeneratedSequence>>& results,
                      const JobSummary& summary) {
  ojson choices = ojson::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& seqs = results[i];
    const auto& picks = summary.returned.at(i);
    for (size_t k = 0; k < picks.size(); ++k) {
      const GeneratedSequence& s = seqs.at(picks[k]);
      ojson c = {{"index", i * static_cast<size_t>(shape.choices_per_prompt) + k}};
      const char* finish_as = nullptr;
      if (shape.chat) {
        c["message"] = openai_chat_message(shape, s.text, s.finish, finish_as);
        c["logprobs"] =
            shape.logprobs ? ojson(chat_logprobs(shape.tokenizer, s.logprobs)) : ojson();
      } else {
        const std::string prefix = i < shape.echo.size() ? shape.echo[i] : std::string();
        c["text"] = prefix + s.text;
        c["logprobs"] = shape.logprobs
                            ? ojson(completion_logprobs(shape.tokenizer, s.logprobs, prefix.size()))
                            : ojson();
        if (shape.logprobs && i < shape.echo.size() && i < shape.first_prompt_token.size())
          prepend_logprobs(c["logprobs"],
                           completion_prompt_logprobs(shape.tokenizer, shape.first_prompt_token[i],
                                                      prompt_logprobs_of(seqs)));
        if (shape.prompt_logprobs_field)
          c["prompt_logprobs"] = vllm_prompt_logprobs(shape.tokenizer, prompt_logprobs_of(seqs));
      }
      c["finish_reason"] = finish_as ? ojson(finish_as) : ojson(finish_json(s.finish));
      c["stop_reason"] = nullptr;
      choices.push_back(c);
    }
  }
  ojson response = {
      {"id", shape.id},           {"object", shape.chat ? "chat.completion" : "text_completion"},
      {"created", shape.created}, {"model", shape.model},
      {"choices", choices},       {"usage", openai_usage(summary)}};
  // vLLM's chat response lists the prompt's (one prompt) at the top.
  if (shape.chat && shape.prompt_logprobs_field && !results.empty())
    response["prompt_logprobs"] =
        vllm_prompt_logprobs(shape.tokenizer, prompt_logprobs_of(results[0]));
  return response;
}

namespace {

ojson chunk_head(const OpenAiShape& shape) {
  return ojson{{"id", shape.id},
               {"object", shape.chat ? "chat.completion.chunk" : "text_completion"},
               {"created", shape.created},
               {"model", shape.model}};
}

}  // namespace

std::optional<ojson> openai_stream_chunk(const OpenAiShape& shape, size_t prompt,
                                         const RequestOutput& out, bool with_echo,
                                         const char* finish_as, const std::string& reasoning) {
  if (out.index >= shape.choices_per_prompt) return std::nullopt;  // beams beyond the returned
  const int64_t index = static_cast<int64_t>(prompt) * shape.choices_per_prompt + out.index;
  ojson choice = {{"index", index}};
  if (shape.chat) {
    ojson delta = ojson::object();
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!out.text.empty()) delta["content"] = out.text;
    if (delta.empty() && out.finish == FinishReason::kNone) return std::nullopt;
    choice["delta"] = delta;
    choice["logprobs"] =
        shape.logprobs ? ojson(chat_logprobs(shape.tokenizer, out.logprobs)) : ojson();
  } else {
    std::string text = out.text;
    if (with_echo && prompt < shape.echo.size()) text = shape.echo[prompt] + text;
    if (text.empty() && out.finish == FinishReason::kNone) return std::nullopt;
    choice["text"] = text;
    choice["logprobs"] =
        shape.logprobs ? ojson(completion_logprobs(shape.tokenizer, out.logprobs, 0)) : ojson();
  }
  choice["finish_reason"] = finish_as ? ojson(finish_as) : ojson(finish_json(out.finish));
  ojson chunk = chunk_head(shape);
  chunk["choices"] = ojson::array({choice});
  return chunk;
}

ojson openai_tool_calls(const std::vector<ToolCall>& calls) {
  ojson out = ojson::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

std::vector<ojson> openai_tool_call_chunks(const OpenAiShape& shape, int64_t index,
                                           const std::vector<ToolCall>& calls) {
  std::vector<ojson> chunks;
  for (size_t k = 0; k < calls.size(); ++k) {
    const ToolCall& c = calls[k];
    for (int part = 0; part < 2; ++part) {
      ojson call = {{"index", k}};
      if (part == 0) {
        call["id"] = c.id;
        call["type"] = "function";
        call["function"] = {{"name", c.name}, {"arguments", ""}};
      } else {
        call["function"] = {{"arguments", c.arguments}};
      }
      ojson chunk = chunk_head(shape);
      chunk["choices"] = ojson::array({ojson{{"index", index},
                                             {"delta", {{"tool_calls", ojson::array({call})}}},
                                             {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}});
      chunks.push_back(std::move(chunk));
    }
  }
  return chunks;
}

ojson openai_role_chunk(const OpenAiShape& shape, int64_t index) {
  ojson chunk = chunk_head(shape);
  chunk["choices"] = ojson::array({ojson{{"index", index},
                                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}});
  return chunk;
}

ojson openai_usage_chunk(const OpenAiShape& shape, const JobSummary& summary) {
  ojson chunk = chunk_head(shape);
  chunk["choices"] = ojson::array();
  chunk["usage"] = openai_usage(summary);
  return chunk;
}

ChatChoiceStream::ChatChoiceStream(const OpenAiShape& shape)
    : shape_(&shape), split_(shape.answer.stream()) {}

std::vector<ojson> ChatChoiceStream::chunks(size_t prompt, const RequestOutput& out) {
  ChatOutputStream::Delta d = split_.push(out.text, out.finish != FinishReason::kNone);
  std::string reasoning = std::move(d.reasoning), content = std::move(d.content);
  std::vector<ToolCall> calls = std::move(d.calls);
  std::vector<ojson> out_chunks;
  RequestOutput o = out;
  o.text = std::move(content);
  if (calls.empty()) {
    if (auto c = openai_stream_chunk(*shape_, prompt, o, false, nullptr, reasoning))
      out_chunks.push_back(std::move(*c));
    return out_chunks;
  }
  RequestOutput before = o;
  before.finish = FinishReason::kNone;
  if (auto c = openai_stream_chunk(*shape_, prompt, before, false, nullptr, reasoning))
    out_chunks.push_back(std::move(*c));
  const int64_t index = static_cast<int64_t>(prompt) * shape_->choices_per_prompt + out.index;
  for (ojson& c : openai_tool_call_chunks(*shape_, index, calls))
    out_chunks.push_back(std::move(c));
  RequestOutput last = o;
  last.text.clear();
  last.logprobs.clear();
  if (auto c = openai_stream_chunk(*shape_, prompt, last, false,
                                   out.finish == FinishReason::kStop ? "tool_calls" : nullptr))
    out_chunks.push_back(std::move(*c));
  return out_chunks;
}

}  // namespace tf
