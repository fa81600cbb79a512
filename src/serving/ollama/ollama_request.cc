#include "serving/ollama/ollama_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "serving/core/api_common.h"
#include "serving/core/request_fields.h"
#include "serving/core/tool_fields.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Ollama's ChatRequest and GenerateRequest fields (api/types.go).
const std::unordered_set<std::string> kOllamaChatFields = {
    "model",       "messages", "stream",   "format", "keep_alive",        "tools",
    "options",     "think",    "truncate", "shift",  "debug_render_only", "logprobs",
    "top_logprobs"};
const std::unordered_set<std::string> kOllamaGenerateFields = {
    "model",    "prompt",      "suffix",     "system",
    "template", "context",     "stream",     "raw",
    "format",   "images",      "keep_alive", "options",
    "think",    "truncate",    "shift",      "debug_render_only",
    "logprobs", "top_logprobs"};
// Ollama's runner options: they tune its llama.cpp runner (threads, GPU layers, batch, memory
// mapping); tokenflow's equivalents are server flags, so a request's are accepted and unused.
const std::unordered_set<std::string> kOllamaRunnerOptions = {
    "num_batch", "num_gpu", "main_gpu",   "low_vram",   "use_mmap", "use_mlock",       "num_thread",
    "numa",      "f16_kv",  "vocab_only", "logits_all", "num_keep", "penalize_newline"};

[[noreturn]] void refuse(const std::string& field, const std::string& message) {
  throw HttpError(400, message, "", field);
}

bool is_int(const json& v) {
  return v.is_number_integer();
}

int64_t int_option(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  // Ollama's clients may send whole numbers as floats (JavaScript): 2.0 is 2.
  double d = 0;
  if (is_int(v)) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      refuse("options", fmt::format("option '{}' is out of range ({}..{})", name, lo, hi));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      refuse("options", fmt::format("option '{}' must be from {} to {}", name, lo, hi));
    return x;
  }
  if (!v.is_number_float() || !std::isfinite(d = v.get<double>()) || d != std::floor(d))
    refuse("options", fmt::format("option '{}' must be an integer", name));
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    refuse("options", fmt::format("option '{}' must be from {} to {}", name, lo, hi));
  return static_cast<int64_t>(d);
}

// A number option; its range is the sampling parameters' own check (the planner's, with the
// message every door gives), unless lo..hi is narrower.
float float_option(const json& v, const std::string& name,
                   double lo = -std::numeric_limits<float>::max(),
                   double hi = std::numeric_limits<float>::max()) {
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    refuse("options", fmt::format("option '{}' must be a number", name));
  if (v.get<double>() < lo || v.get<double>() > hi)
    refuse("options", fmt::format("option '{}' must be a number from {} to {}", name, lo, hi));
  return static_cast<float>(v.get<double>());
}

void read_options(const json& body, CompletionRequest& r) {
  if (!present(body, "options")) return;
  const json& o = body["options"];
  if (!o.is_object()) refuse("options", "'options' must be an object");
  SamplingParams& p = r.params;
  std::optional<float> repeat_penalty;
  std::optional<int64_t> repeat_last_n;
  for (auto it = o.begin(); it != o.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (v.is_null()) continue;
    if (k == "num_predict") {
      const int64_t n = int_option(v, k, -2, INT32_MAX);
      if (n == 0) refuse("options", "option 'num_predict' must be positive, -1 or -2");
      // -1 (no limit) and -2 (fill the context): up to the context.
      r.default_max_tokens = n > 0 ? static_cast<int32_t>(n) : INT32_MAX;
    } else if (k == "temperature") {
      p.temperature = float_option(v, k);
    } else if (k == "top_k") {
      p.top_k = static_cast<int32_t>(int_option(v, k, INT32_MIN, INT32_MAX));
    } else if (k == "top_p") {
      p.top_p = float_option(v, k);
    } else if (k == "min_p") {
      p.min_p = float_option(v, k);
    } else if (k == "typical_p") {
      p.typical_p = float_option(v, k);
    } else if (k == "repeat_penalty") {
      repeat_penalty = float_option(v, k, 0);
      if (*repeat_penalty <= 0) refuse("options", "option 'repeat_penalty' must be > 0");
    } else if (k == "repeat_last_n") {
      repeat_last_n = int_option(v, k, -1, INT32_MAX);
    } else if (k == "presence_penalty") {
      p.presence_penalty = float_option(v, k);
    } else if (k == "frequency_penalty") {
      p.frequency_penalty = float_option(v, k);
    } else if (k == "seed") {
      const int64_t s = int_option(v, k, INT64_MIN, INT64_MAX);
      if (s >= 0) p.seed = static_cast<uint64_t>(s);  // Ollama's -1: a random seed
    } else if (k == "stop") {
      if (!v.is_array()) refuse("options", "option 'stop' must be a list of strings");
      for (const auto& s : v) {
        if (!s.is_string() || s.get<std::string>().empty())
          refuse("options", "option 'stop' must be a list of non-empty strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else if (k == "num_ctx") {
      r.context_limit = int_option(v, k, 1, INT32_MAX);
    } else if (k == "mirostat") {
      if (int_option(v, k, 0, 2) != 0)
        refuse("options", "option 'mirostat' is not supported (0 only): use top_k, top_p or min_p");
    } else if (k == "mirostat_tau" || k == "mirostat_eta") {
      (void)float_option(v, k, 0, 100);  // meaningful only with mirostat, which is 0
    } else if (k == "tfs_z") {
      if (float_option(v, k, 0, 100) != 1.0f)
        refuse("options", "option 'tfs_z' is not supported (1.0, off, only)");
    } else if (kOllamaRunnerOptions.count(k)) {
      if (!v.is_number() && !v.is_boolean())
        refuse("options", fmt::format("option '{}' must be a number or a boolean", k));
    } else {
      refuse("options", fmt::format("unknown option '{}'", k));
    }
  }
  // Ollama's repeat_penalty looks back repeat_last_n tokens (64 by default); tokenflow's
  // repetition penalty covers the whole sequence (vLLM's rule), which is repeat_last_n -1.
  if (repeat_last_n && *repeat_last_n == 0) repeat_penalty = 1.0f;  // 0: the penalty is off
  if (repeat_penalty && *repeat_penalty != 1.0f) {
    if (repeat_last_n && *repeat_last_n > 0)
      refuse("options",
             fmt::format("option 'repeat_last_n' {} is not supported: tokenflow's repeat_penalty "
                         "covers the whole context (repeat_last_n -1)",
                         *repeat_last_n));
    p.repetition_penalty = *repeat_penalty;
  }
}

void read_format(const json& body, const ojson& ordered, CompletionRequest& r) {
  if (!present(body, "format")) return;
  const json& f = body["format"];
  OutputConstraint& c = r.output;
  c.field = "format";
  if (f.is_string()) {
    const std::string s = f.get<std::string>();
    if (s.empty()) return;
    if (s != "json")
      refuse("format", fmt::format("'format' must be \"json\" or a JSON schema, not "
                                   "\"{}\"",
                                   s));
    c.kind = OutputConstraint::kJsonObject;
  } else if (f.is_object()) {
    c.kind = OutputConstraint::kJsonSchema;
    c.text = ordered["format"].dump();
  } else {
    refuse("format", "'format' must be \"json\" or a JSON schema object");
  }
}

void read_think(const json& body, CompletionRequest& r) {
  if (!present(body, "think")) return;
  const json& t = body["think"];
  if (t.is_boolean()) {
    r.chat_template_kwargs["enable_thinking"] = t.get<bool>();
  } else if (t.is_string() && (t == "low" || t == "medium" || t == "high")) {
    // gpt-oss's levels: its template reads reasoning_effort.
    r.chat_template_kwargs["enable_thinking"] = true;
    r.chat_template_kwargs["reasoning_effort"] = t.get<std::string>();
  } else {
    refuse("think", "'think' must be true, false, \"low\", \"medium\" or \"high\"");
  }
}

// What both bodies share: model, stream, format, options, think, keep_alive and the fields
// accepted with one value only.
void read_common(const json& body, const ojson& ordered, CompletionRequest& r) {
  if (!present(body, "model") || !body["model"].is_string() ||
      body["model"].get<std::string>().empty())
    refuse("model", "'model' is required");
  r.model = body["model"].get<std::string>();
  r.stream = bool_field(body, "stream", true);
  read_format(body, ordered, r);
  read_options(body, r);
  read_think(body, r);
  if (present(body, "keep_alive")) {
    // A duration ("5m", "1h", "-1") or seconds: accepted; the config decides what stays loaded.
    const json& k = body["keep_alive"];
    if (!k.is_string() && !k.is_number()) refuse("keep_alive", "'keep_alive' must be a duration");
  }
  (void)bool_field(body, "truncate", true);  // a prompt past the context is refused either way
  (void)bool_field(body, "shift", true);     // generation stops at the context (done_reason length)
  if (bool_field(body, "debug_render_only", false))
    refuse("debug_render_only", "'debug_render_only' is not supported: use POST /tokenize");
  if (bool_field(body, "logprobs", false)) {
    int32_t top = 0;
    if (present(body, "top_logprobs")) {
      const json& t = body["top_logprobs"];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > 20)
        refuse("top_logprobs", "'top_logprobs' must be an integer from 0 to 20");
      top = static_cast<int32_t>(t.get<int64_t>());
    }
    r.params.logprobs = top;
  } else if (present(body, "top_logprobs")) {
    refuse("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  try {
    apply_request_rules(r, false);
  } catch (const FieldError& e) {
    refuse(e.field() == "stop" ? "options" : e.field(), e.what());
  }
  if (r.tools.forced() && r.output.kind != OutputConstraint::kNone)
    refuse("format", "'format' and forced tool calls cannot be combined");
}

void refuse_images(const json& m, const std::string& where) {
  if (present(m, "images")) {
    if (!m["images"].is_array()) refuse(where, fmt::format("'{}.images' must be a list", where));
    if (!m["images"].empty())
      refuse(where, "images are not supported: the served models take text only");
  }
}

ojson tool_calls_of(const json& calls, const std::string& where, size_t& counter) {
  if (!calls.is_array()) refuse("messages", fmt::format("{}.tool_calls must be a list", where));
  ojson out = ojson::array();
  for (const auto& c : calls) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string())
      refuse(
          "messages",
          fmt::format("{}.tool_calls: each call is {{\"function\": {{\"name\", \"arguments\"}}}}",
                      where));
    const json& fn = c["function"];
    json args = fn.value("arguments", json::object());
    if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
    if (!args.is_object())
      refuse("messages", fmt::format("{}.tool_calls: 'arguments' must be an object", where));
    const std::string id = c.contains("id") && c["id"].is_string()
                               ? c["id"].get<std::string>()
                               : fmt::format("call_{}", counter);
    ++counter;
    out.push_back({{"id", id},
                   {"type", "function"},
                   {"function", {{"name", fn["name"]}, {"arguments", ojson(args)}}}});
  }
  return out;
}

std::vector<ChatMessage> read_ollama_messages(const json& body) {
  std::vector<ChatMessage> out;
  if (!present(body, "messages")) return out;
  const json& msgs = body["messages"];
  if (!msgs.is_array()) refuse("messages", "'messages' must be a list");
  if (msgs.size() > kMaxMessages)
    refuse("messages", fmt::format("'messages' holds more than {} messages", kMaxMessages));
  size_t calls = 0;
  // The calls of the latest assistant turn not answered yet: a tool message answers the first
  // one with its tool_name (Ollama's messages carry no call ids), else the first.
  std::vector<std::pair<std::string, std::string>> open_calls;  // (name, id)
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      refuse("messages", fmt::format("{} must be an object with a 'role'", where));
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      refuse("messages", fmt::format("{}.role must be system, user, assistant or tool, not \"{}\"",
                                     where, role));
    for (auto it = m.begin(); it != m.end(); ++it) {
      static const std::unordered_set<std::string> known = {
          "role", "content", "images", "tool_calls", "thinking", "tool_name", "tool_call_id"};
      if (!known.count(it.key()))
        refuse("messages", fmt::format("{}: unknown field '{}'", where, it.key()));
    }
    ChatMessage msg(role, "");
    if (present(m, "content")) {
      if (!m["content"].is_string())
        refuse("messages", fmt::format("{}.content must be a string", where));
      msg.content = m["content"].get<std::string>();
    }
    refuse_images(m, where);
    // An assistant's earlier thinking is not put back into the context (as Ollama's templates
    // and Anthropic's API drop it).
    if (present(m, "thinking") && !m["thinking"].is_string())
      refuse("messages", fmt::format("{}.thinking must be a string", where));
    if (present(m, "tool_calls")) {
      if (role != "assistant")
        refuse("messages", fmt::format("{}: only assistant messages carry tool_calls", where));
      msg.tool_calls = tool_calls_of(m["tool_calls"], where, calls);
      open_calls.clear();
      for (const auto& c : msg.tool_calls)
        open_calls.emplace_back(c["function"]["name"].get<std::string>(),
                                c["id"].get<std::string>());
    }
    if (role == "tool") {
      if (present(m, "tool_name")) {
        if (!m["tool_name"].is_string())
          refuse("messages", fmt::format("{}.tool_name must be a string", where));
        msg.name = m["tool_name"].get<std::string>();
      }
      auto answered = std::find_if(open_calls.begin(), open_calls.end(),
                                   [&](const auto& c) { return c.first == msg.name; });
      if (answered == open_calls.end()) answered = open_calls.begin();
      if (answered != open_calls.end()) {
        msg.tool_call_id = answered->second;
        if (msg.name.empty()) msg.name = answered->first;
        open_calls.erase(answered);
      }
      if (present(m, "tool_call_id")) {
        if (!m["tool_call_id"].is_string())
          refuse("messages", fmt::format("{}.tool_call_id must be a string", where));
        msg.tool_call_id = m["tool_call_id"].get<std::string>();
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

OllamaRequest read_ollama_chat(const json& body, const ojson& ordered, bool log_prompt) {
  check_known_fields(body, [](const std::string& k) { return kOllamaChatFields.count(k) > 0; });
  OllamaRequest o;
  CompletionRequest& r = o.request;
  r.chat = true;
  r.messages = read_ollama_messages(body);
  o.load_only = r.messages.empty();
  if (present(body, "tools")) {
    json tools_only = {{"tools", body["tools"]}};
    r.tools = read_tool_request(tools_only, ojson{{"tools", ordered["tools"]}});
  }
  read_common(body, ordered, r);
  if (log_prompt) r.logged_prompt = dump_json(ordered.value("messages", ojson::array()));
  return o;
}

OllamaRequest read_ollama_generate(const json& body, const ojson& ordered, bool log_prompt) {
  check_known_fields(body, [](const std::string& k) { return kOllamaGenerateFields.count(k) > 0; });
  OllamaRequest o;
  CompletionRequest& r = o.request;
  const std::string prompt = string_field(body, "prompt");
  const std::string system = string_field(body, "system");
  o.raw = bool_field(body, "raw", false);
  if (!string_field(body, "suffix").empty())
    refuse("suffix", "'suffix' (fill in the middle) is not supported");
  if (!string_field(body, "template").empty())
    refuse("template",
           "'template' is not supported: tokenflow renders the model's Jinja chat template "
           "(set it with --chat-template), or send a raw prompt");
  if (present(body, "context")) {
    if (!body["context"].is_array()) refuse("context", "'context' must be a list of token ids");
    if (!body["context"].empty())
      refuse("context",
             "'context' (a previous answer's tokens) is not supported: send the conversation to "
             "/api/chat");
  }
  refuse_images(body, "prompt");
  o.load_only = prompt.empty();
  if (o.raw) {
    PromptInput in;
    in.is_text = true;
    in.text = prompt;
    r.prompts.push_back(std::move(in));
    r.default_max_tokens = INT32_MAX;
  } else {
    r.chat = true;
    if (!system.empty()) r.messages.push_back({"system", system});
    r.messages.push_back({"user", prompt});
  }
  read_common(body, ordered, r);
  if (log_prompt) r.logged_prompt = prompt;
  return o;
}

OllamaEmbedRequest read_ollama_embed(const json& body, bool legacy) {
  static const std::unordered_set<std::string> embed = {"model",   "input",      "truncate",
                                                        "options", "keep_alive", "dimensions"};
  static const std::unordered_set<std::string> embeddings = {"model", "prompt", "options",
                                                             "keep_alive"};
  const auto& known = legacy ? embeddings : embed;
  check_known_fields(body, [&](const std::string& k) { return known.count(k) > 0; });
  OllamaEmbedRequest e;
  e.legacy = legacy;
  if (!present(body, "model") || !body["model"].is_string() ||
      body["model"].get<std::string>().empty())
    refuse("model", "'model' is required");
  e.model = body["model"].get<std::string>();
  if (present(body, "options") && !body["options"].is_object())
    refuse("options", "'options' must be an object");
  if (present(body, "keep_alive") && !body["keep_alive"].is_string() &&
      !body["keep_alive"].is_number())
    refuse("keep_alive", "'keep_alive' must be a duration");
  const char* field = legacy ? "prompt" : "input";
  e.inputs.field = field;
  const json& input = body.value(field, json());
  auto add = [&](const json& v) {
    if (!v.is_string())
      refuse(field, fmt::format("'{}' must be a string or a list of strings", field));
    PromptInput p;
    p.is_text = true;
    p.text = v.get<std::string>();
    e.inputs.inputs.push_back(std::move(p));
  };
  if (input.is_array()) {
    if (input.empty()) refuse(field, fmt::format("'{}' must not be empty", field));
    if (input.size() > 2048) refuse(field, fmt::format("'{}' holds more than 2048 inputs", field));
    for (const auto& v : input) add(v);
  } else {
    add(input);
  }
  if (!legacy) {
    e.inputs.truncate = bool_field(body, "truncate", true);
    if (present(body, "dimensions")) {
      const json& d = body["dimensions"];
      if (!d.is_number_integer() || d.get<int64_t>() < 1)
        refuse("dimensions", "'dimensions' must be a positive integer");
      e.dimensions = d.get<int64_t>();
    }
  }
  return e;
}

std::string ollama_model_field(
    const std::string& name,
    const std::function<bool(const std::string& model, const std::string& label)>& has_label) {
  const size_t colon = name.rfind(':');
  if (colon == std::string::npos || name.find('@') != std::string::npos) return name;
  const std::string model = name.substr(0, colon), tag = name.substr(colon + 1);
  if (tag == "latest") return model;
  int64_t v = 0;
  const auto r = std::from_chars(tag.data(), tag.data() + tag.size(), v);
  if (!tag.empty() && r.ec == std::errc() && r.ptr == tag.data() + tag.size()) return name;
  if (has_label && has_label(model, tag)) return model + "@" + tag;
  return name;
}

}  // namespace tf
