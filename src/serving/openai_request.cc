#include "serving/openai_request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "serving/api_common.h"
#include "tokenizer/chat_template.h"

namespace tf {
namespace {

using nlohmann::json;

template <typename T>
bool get_number(const json& body, const char* key, T& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) fail_field(key, "'{}' must be an integer", key);
    if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX})
      fail_field(key, "'{}' is out of range", key);
    const int64_t v = it->get<int64_t>();
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      fail_field(key, "'{}' is out of range", key);
    out = static_cast<T>(v);
  } else {
    if (!it->is_number()) fail_field(key, "'{}' must be a number", key);
    const double d = it->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<T>::max()))
      fail_field(key, "'{}' is out of range", key);
    out = static_cast<T>(d);
  }
  return true;
}

bool get_bool(const json& body, const char* key, bool& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) fail_field(key, "'{}' must be true or false", key);
  out = it->get<bool>();
  return true;
}

std::vector<int32_t> int_list(const json& v, const char* key) {
  if (!v.is_array()) fail_field(key, "'{}' must be a list of token ids", key);
  std::vector<int32_t> out;
  for (const auto& x : v) out.push_back(token_id(x, key));
  return out;
}

}  // namespace

int32_t token_id(const json& x, const char* key) {
  if (!x.is_number_integer()) fail_field(key, "'{}' must be a list of token ids", key);
  const bool in_range = x.is_number_unsigned()
                            ? x.get<uint64_t>() <= INT32_MAX
                            : x.get<int64_t>() >= 0 && x.get<int64_t>() <= INT32_MAX;
  if (!in_range)
    fail_field(key, "'{}' holds {}, which is not a token id (0..2147483647)", key, x.dump());
  return static_cast<int32_t>(x.get<int64_t>());
}

SamplingParams parse_sampling_params(const json& body, bool chat, int32_t default_max_tokens) {
  if (!body.is_object()) fail("the request body must be a JSON object");
  SamplingParams p;
  p.max_tokens = default_max_tokens;
  if (chat) get_number(body, "max_completion_tokens", p.max_tokens);
  get_number(body, "max_tokens", p.max_tokens);
  get_number(body, "min_tokens", p.min_tokens);
  get_number(body, "temperature", p.temperature);
  get_number(body, "top_p", p.top_p);
  get_number(body, "top_k", p.top_k);
  if (p.top_k == -1) p.top_k = 0;  // vLLM's "off"
  get_number(body, "min_p", p.min_p);
  get_number(body, "typical_p", p.typical_p);
  get_number(body, "repetition_penalty", p.repetition_penalty);
  get_number(body, "presence_penalty", p.presence_penalty);
  get_number(body, "frequency_penalty", p.frequency_penalty);
  get_number(body, "no_repeat_ngram_size", p.no_repeat_ngram_size);
  get_number(body, "n", p.n);
  int32_t best_of = 0;
  if (get_number(body, "best_of", best_of)) p.best_of = best_of;
  uint64_t seed = 0;
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) fail_field("seed", "'seed' must be an integer");
    seed = body["seed"].is_number_unsigned() ? body["seed"].get<uint64_t>()
                                             : static_cast<uint64_t>(body["seed"].get<int64_t>());
    p.seed = seed;
  }
  get_bool(body, "ignore_eos", p.ignore_eos);
  get_bool(body, "skip_special_tokens", p.skip_special_tokens);
  get_bool(body, "include_stop_str_in_output", p.include_stop_str_in_output);
  get_bool(body, "early_stopping", p.early_stopping);
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop = {it->get<std::string>()};
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string()) fail_field("stop", "'stop' must be a string or a list of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      fail_field("stop", "'stop' must be a string or a list of strings");
    }
  }
  check_stop_limits(p);
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    p.stop_token_ids = int_list(*it, "stop_token_ids");
  }
  if (auto it = body.find("bad_words_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_array())
      fail_field("bad_words_ids", "'bad_words_ids' must be a list of lists of token ids");
    for (const auto& seq : *it) p.bad_words_ids.push_back(int_list(seq, "bad_words_ids"));
  }
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) fail_field("logit_bias", "'logit_bias' must map token ids to numbers");
    for (const auto& [k, v] : it->items()) {
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(k, &used);
      } catch (const std::exception&) {
      }
      if (used != k.size() || id < 0 || id > INT32_MAX)
        fail_field("logit_bias", "'logit_bias' key '{}' is not a token id", k);
      if (!v.is_number() || !std::isfinite(v.get<double>()) || std::fabs(v.get<double>()) > 1e6)
        fail_field("logit_bias", "'logit_bias' values must be finite numbers");
      p.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
    }
    // By id, whatever the body's key order ("42" sorts before "7" as text): one request, one form.
    std::stable_sort(p.logit_bias.begin(), p.logit_bias.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  if (chat) {
    bool want = false;
    if (get_bool(body, "logprobs", want) && want) {
      p.logprobs = 0;
      get_number(body, "top_logprobs", *p.logprobs);
    }
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    int32_t k = 0;
    get_number(body, "logprobs", k);
    p.logprobs = k;
  }
  get_number(body, "length_penalty", p.length_penalty);
  return p;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text,
                                   bool add_special_tokens, int64_t context, const char* field) {
  if (context > 0) {
    const size_t at_least = tokenizer.min_tokens_for_bytes(text.size());
    if (at_least >= static_cast<size_t>(context)) {
      throw HttpError(400,
                      fmt::format("This model's maximum context length is {} tokens, the prompt "
                                  "has at least {} tokens ({} bytes)",
                                  context, at_least, text.size()),
                      "context_length_exceeded", field);
    }
  }
  return tokenizer.encode(text, add_special_tokens);
}

void check_stop_limits(const SamplingParams& p) {
  // Each sequence's stop checker holds the strings: bounded, so that a request cannot turn a
  // body of a few MB into gigabytes (n copies of a 7 MB stop string).
  size_t stop_bytes = 0;
  for (const auto& s : p.stop) stop_bytes += s.size();
  if (p.stop.size() > kMaxStopStrings || stop_bytes > kMaxStopBytes)
    fail_field("stop",
               "'stop' takes at most {} strings of {} bytes in all (got {} strings, {} bytes)",
               kMaxStopStrings, kMaxStopBytes, p.stop.size(), stop_bytes);
}

std::vector<PromptInput> read_completion_prompts(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) fail_field(field, "'{}' is required", field);
  const std::string shape = fmt::format(
      "'{}' must be a string, a list of strings, a list of token ids or a list of lists of token "
      "ids",
      field);
  auto ids = [&](const json& v) {
    PromptInput p{false, {}, int_list(v, field)};
    if (p.ids.empty()) fail_field(field, "'{}' must not be empty", field);
    return p;
  };
  std::vector<PromptInput> out;
  if (it->is_string()) {
    out.push_back({true, it->get<std::string>(), {}});
  } else if (!it->is_array() || it->empty()) {
    fail_field(field, "{}", shape);
  } else if (const json& first = (*it)[0]; first.is_number_integer()) {
    out.push_back(ids(*it));
  } else if (first.is_string()) {
    for (const auto& p : *it) {
      if (!p.is_string()) fail_field(field, "{}", shape);
      out.push_back({true, p.get<std::string>(), {}});
    }
  } else if (first.is_array()) {
    for (const auto& p : *it) out.push_back(ids(p));
  } else {
    fail_field(field, "{}", shape);
  }
  return out;
}

std::string chat_template_source(const LoadedTokenizer& tokenizer, const ModelConfig& config) {
  if (!tokenizer.chat_template.empty()) return tokenizer.chat_template;
  const std::string& a = config.architecture;
  if (a == "Qwen3ForCausalLM" || a == "Qwen3MoeForCausalLM") return builtin_chat_template("qwen3");
  if (a == "Qwen2ForCausalLM" || a == "Qwen2MoeForCausalLM" || a == "GPT2LMHeadModel")
    return builtin_chat_template("chatml");
  if (a == "MistralForCausalLM" || a == "MixtralForCausalLM")
    return builtin_chat_template("mistral");
  if (a == "Gemma3ForCausalLM") return builtin_chat_template("gemma3");
  if (a == "GemmaForCausalLM" || a == "Gemma2ForCausalLM") return builtin_chat_template("gemma");
  if (a == "Phi3ForCausalLM" && config.vocab_size == 100352) return builtin_chat_template("phi4");
  if (config.vocab_size >= 128000) return builtin_chat_template("llama3");
  return builtin_chat_template("llama2");
}

namespace {

// An assistant message's tool_calls as templates take them (transformers' form): each call's
// arguments, sent as a JSON string (OpenAI) or an object, become an object.
nlohmann::ordered_json read_message_tool_calls(const json& calls) {
  if (!calls.is_array()) fail_field("messages", "a message's 'tool_calls' must be a list");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& c : calls) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string())
      fail_field("messages",
                 "each of a message's 'tool_calls' must be {{\"id\", \"type\": \"function\", "
                 "\"function\": {{\"name\", \"arguments\"}}}}");
    const json& fn = c["function"];
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    if (present(fn, "arguments")) {
      if (fn["arguments"].is_string()) {
        args = nlohmann::ordered_json::parse(fn["arguments"].get<std::string>(), nullptr, false);
        if (args.is_discarded())
          fail_field("messages", "a tool call's 'arguments' must be a JSON object's text");
      } else {
        args = fn["arguments"];
      }
      if (!args.is_object())
        fail_field("messages", "a tool call's 'arguments' must be a JSON object's text");
    }
    nlohmann::ordered_json call = {
        {"type", "function"},
        {"function", {{"name", fn["name"].get<std::string>()}, {"arguments", args}}}};
    if (c.contains("id") && c["id"].is_string()) call["id"] = c["id"];
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

std::vector<ChatMessage> read_chat_messages(const json& body) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    fail_field("messages", "'messages' must be a non-empty list");
  if (it->size() > kMaxMessages)
    fail_field("messages", "'messages' holds {} messages; at most {} are taken", it->size(),
               kMaxMessages);
  std::vector<ChatMessage> messages;
  for (const auto& m : *it) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
        (m.contains("content") && !m["content"].is_null() && !m["content"].is_string() &&
         !m["content"].is_array())) {
      fail_field("messages", "each message needs a string 'role' and a string or list 'content'");
    }
    std::string content;
    const json& c = m.contains("content") ? m["content"] : json();
    if (c.is_string()) {
      content = c.get<std::string>();
    } else if (c.is_array()) {  // [{"type": "text", "text": "..."}]
      for (const auto& part : c) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string() ||
            part["type"] != "text" || !part.contains("text") || !part["text"].is_string()) {
          fail(
              "each content part must be {{\"type\": \"text\", \"text\": STRING}}: only text "
              "content parts are supported");
        }
        content += part["text"].get<std::string>();
      }
    }
    ChatMessage msg(m["role"].get<std::string>(), std::move(content));
    if (present(m, "tool_calls")) msg.tool_calls = read_message_tool_calls(m["tool_calls"]);
    for (const char* k : {"tool_call_id", "name"}) {
      if (!present(m, k)) continue;
      if (!m[k].is_string()) fail_field("messages", "a message's '{}' must be a string", k);
      (std::string(k) == "name" ? msg.name : msg.tool_call_id) = m[k].get<std::string>();
    }
    messages.push_back(std::move(msg));
  }
  return messages;
}

std::vector<int32_t> render_chat_prompt(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt,
                                        const LoadedTokenizer& tokenizer, const ModelConfig& config,
                                        const nlohmann::json& template_kwargs,
                                        const nlohmann::ordered_json& tools,
                                        std::string* text_out) {
  if (!tokenizer.tokenizer) fail("this model has no tokenizer, so it cannot take chat messages");
  const ChatTemplate tmpl = ChatTemplate::parse(chat_template_source(tokenizer, config));
  const std::string text = tmpl.apply(messages, add_generation_prompt, tokenizer.bos_token,
                                      tokenizer.eos_token, template_kwargs, tools);
  if (text_out) *text_out = text;
  return encode_prompt(*tokenizer.tokenizer, text, /*add_special_tokens=*/false, config.max_seq_len,
                       "messages");
}

}  // namespace tf
