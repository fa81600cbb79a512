#include "serving/completion_request.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <unordered_set>

#include "serving/api_common.h"
#include "serving/openai_request.h"
#include "serving/structured_output.h"

namespace tf {
namespace {

using json = nlohmann::json;

// Every field a body may carry: OpenAI's, and the extensions vLLM accepts. Anything else is
// rejected by name, as OpenAI does, so a typo never silently changes nothing.
const std::unordered_set<std::string> kCommonFields = {
    "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop", "seed",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "user", "best_of",
    // vLLM's sampling and extra parameters.
    "top_k", "min_p", "typical_p", "repetition_penalty", "min_tokens", "ignore_eos",
    "stop_token_ids", "skip_special_tokens", "include_stop_str_in_output", "length_penalty",
    "use_beam_search", "early_stopping", "no_repeat_ngram_size", "bad_words_ids", "priority",
    "request_id", "cache_salt", "spaces_between_special_tokens", "add_special_tokens", "timeout",
    "service_tier", "metadata", "store", "prompt_logprobs",
    // tokenflow's: false turns speculative decoding off for this request.
    "speculative",
    // Structured output (structured_output.h): OpenAI's, vLLM's and llama.cpp's names.
    "response_format", "grammar", "guided_grammar", "guided_json", "guided_regex", "guided_choice",
    "guided_whitespace_pattern", "guided_decoding_backend", "structured_outputs", "json_schema"};
const std::unordered_set<std::string> kCompletionFields = {"prompt", "echo", "suffix"};
const std::unordered_set<std::string> kChatFields = {
    "messages",    "max_completion_tokens", "top_logprobs",          "tools",
    "tool_choice", "parallel_tool_calls",   "add_generation_prompt", "chat_template_kwargs"};

// The sampling parameters a Predict instance may carry.
const std::unordered_set<std::string> kPredictParams = {"max_tokens",
                                                        "min_tokens",
                                                        "temperature",
                                                        "top_p",
                                                        "top_k",
                                                        "min_p",
                                                        "typical_p",
                                                        "repetition_penalty",
                                                        "presence_penalty",
                                                        "frequency_penalty",
                                                        "seed",
                                                        "stop",
                                                        "stop_token_ids",
                                                        "ignore_eos",
                                                        "logprobs",
                                                        "logit_bias",
                                                        "skip_special_tokens",
                                                        "include_stop_str_in_output",
                                                        "no_repeat_ngram_size"};

void check_completion_fields(const json& body, bool chat) {
  const auto& own = chat ? kChatFields : kCompletionFields;
  check_known_fields(
      body, [&](const std::string& key) { return kCommonFields.count(key) || own.count(key); });
  if (present(body, "suffix") && body["suffix"] != "") {
    throw HttpError(400, "'suffix' is not supported", "unsupported_parameter", "suffix");
  }
  for (const char* k : {"stream", "echo", "use_beam_search", "add_special_tokens"}) {
    if (present(body, k) && !body[k].is_boolean())
      throw HttpError(400, fmt::format("'{}' must be true or false", k), "", k);
  }
  if (present(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object())
      throw HttpError(400, "'stream_options' must be an object", "", "stream_options");
    if (so.contains("include_usage") && !so["include_usage"].is_boolean() &&
        !so["include_usage"].is_null())
      throw HttpError(400, "'stream_options.include_usage' must be true or false", "",
                      "stream_options");
  }
  if (present(body, "user") && !body["user"].is_string())
    throw HttpError(400, "'user' must be a string", "", "user");
}

// The body field an error message is about: a leading 'quoted' name or first word that the body
// holds ("temperature must be >= 0" -> temperature). Only for the few plain errors left.
std::string field_of(const std::string& message, const json& body) {
  size_t b = !message.empty() && message[0] == '\'' ? 1 : 0, e = b;
  while (e < message.size() &&
         (std::islower(static_cast<unsigned char>(message[e])) || message[e] == '_'))
    ++e;
  const std::string word = message.substr(b, e - b);
  return body.is_object() && body.contains(word) ? word : std::string();
}

void read_body(const json& body, bool chat, bool log_prompt,
               const std::function<nlohmann::ordered_json()>& ordered_body, CompletionRequest& r) {
  check_completion_fields(body, chat);
  r.chat = chat;
  r.model = string_field(body, "model");
  r.user = string_field(body, "user");
  r.cache_salt = string_field(body, "cache_salt");
  // The body with its members in the order sent, parsed at most once for the schema and the
  // tools' parameters.
  std::optional<nlohmann::ordered_json> ordered;
  const std::function<nlohmann::ordered_json()> ordered_once = [&] {
    if (!ordered)
      ordered = ordered_body ? ordered_body() : nlohmann::ordered_json::parse(body.dump());
    return *ordered;
  };
  r.output = read_output_constraint(body, ordered_once);
  r.params = parse_sampling_params(body, chat, 16);
  r.max_tokens_given =
      present(body, "max_tokens") || (chat && present(body, "max_completion_tokens"));
  if (chat && !present(body, "max_tokens") && present(body, "max_completion_tokens"))
    r.max_tokens_field = "max_completion_tokens";
  r.stream = body.value("stream", false);
  if (r.stream && present(body, "stream_options")) {
    const json& iu = body["stream_options"].value("include_usage", json());
    r.include_usage = iu.is_boolean() && iu.get<bool>();
  }
  r.echo = !chat && body.value("echo", false);
  r.add_special_tokens = body.value("add_special_tokens", true);
  r.speculative = bool_field(body, "speculative", true);
  if (present(body, "priority")) {
    const json& v = body["priority"];
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX) ||
        (!v.is_number_unsigned() && (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)))
      throw HttpError(400, "'priority' must be a 32-bit integer", "", "priority");
    r.priority = static_cast<int32_t>(v.get<int64_t>());
  }
  if (present(body, "timeout")) {
    if (!body["timeout"].is_number() || !(body["timeout"].get<double>() > 0))
      throw HttpError(400, "'timeout' must be a number of seconds > 0", "", "timeout");
    // Bounded before converting (1e300 s is no negative deadline); the server's maximum is
    // applied by the planner.
    const double ms = std::min(body["timeout"].get<double>() * 1000, 1e12);
    r.timeout = std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(ms)));
  }
  if (present(body, "prompt_logprobs")) {
    const json& v = body["prompt_logprobs"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxLogprobs)
      throw HttpError(
          400, fmt::format("'prompt_logprobs' must be an integer from 0 to {}", kMaxLogprobs), "",
          "prompt_logprobs");
    r.prompt_logprobs = static_cast<int32_t>(v.get<int64_t>());
  }
  apply_request_rules(r, body.value("use_beam_search", false));
  if (chat) {
    r.messages = read_chat_messages(body);
    if (present(body, "tools") || present(body, "tool_choice") ||
        present(body, "parallel_tool_calls")) {
      r.tools = read_tool_request(body, ordered_once());
      if (r.tools.forced() && r.output.kind != OutputConstraint::kNone)
        throw HttpError(400,
                        fmt::format("'tool_choice' forces a tool call, and '{}' asks for another "
                                    "output shape: give one",
                                    r.output.field),
                        "", "tool_choice");
    }
    bool add = true;
    if (present(body, "add_generation_prompt")) {
      if (!body["add_generation_prompt"].is_boolean())
        fail_field("add_generation_prompt", "'add_generation_prompt' must be true or false");
      add = body["add_generation_prompt"].get<bool>();
    }
    r.add_generation_prompt = add;
    if (present(body, "chat_template_kwargs")) {
      const json& kw = body["chat_template_kwargs"];
      if (!kw.is_object())
        fail_field("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      for (const char* reserved : {"messages", "add_generation_prompt", "bos_token", "eos_token"})
        if (kw.contains(reserved))
          fail_field("chat_template_kwargs",
                     "'chat_template_kwargs' may not set '{}' (a field of its own)", reserved);
      r.chat_template_kwargs = kw;
    }
  } else {
    r.prompts = read_completion_prompts(body);
  }
  const char* field = chat ? "messages" : "prompt";
  if (log_prompt && body.contains(field))
    r.logged_prompt =
        body[field].is_string() ? body[field].get<std::string>() : dump_json(body[field]);
}

}  // namespace

void apply_request_rules(CompletionRequest& r, bool use_beam_search) {
  SamplingParams& p = r.params;
  if (use_beam_search) {
    // vLLM's beam search: best_of (or n) beams, the n best returned.
    p.num_beams = std::max(p.best_of.value_or(p.n), 2);
    p.num_return_sequences = p.n;
    p.best_of.reset();
  }
  if (r.stream && p.best_of && *p.best_of > p.n) {
    throw HttpError(400, "'best_of' greater than 'n' cannot stream: the best are known at the end",
                    "", "best_of");
  }
  if (r.prompt_logprobs && r.stream)
    throw HttpError(400, "'prompt_logprobs' cannot stream (they come with the whole response)", "",
                    "prompt_logprobs");
  if (p.beam_search() && (r.prompt_logprobs || (r.echo && p.logprobs)))
    throw HttpError(400, "prompt logprobs with beam search are not supported", "",
                    r.prompt_logprobs ? "prompt_logprobs" : "echo");
  check_stop_limits(p);
}

CompletionRequest read_openai_request(const json& body, bool chat, bool log_prompt,
                                      const std::function<nlohmann::ordered_json()>& ordered_body) {
  CompletionRequest r;
  try {
    read_body(body, chat, log_prompt, ordered_body, r);
  } catch (const HttpError&) {
    throw;
  } catch (const FieldError& e) {
    // The field as the body names it (chat's max_completion_tokens is max_tokens inside).
    std::string field = e.field();
    if (field == "max_tokens" && !body.contains(field) && body.contains("max_completion_tokens"))
      field = "max_completion_tokens";
    throw HttpError(400, e.what(), "", field);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInternal) throw;
    throw HttpError(400, e.what(), "", field_of(e.what(), body));
  }
  return r;
}

// ---- TF Serving's Predict --------------------------------------------------------------------

bool is_predict_param(const std::string& name) {
  return kPredictParams.count(name) > 0;
}

namespace {

std::vector<int32_t> predict_ids(const json& v) {
  if (!v.is_array() || v.empty())
    throw HttpError(400, "'input_ids' must be a non-empty list of token ids", "", "input_ids");
  std::vector<int32_t> out;
  for (const auto& x : v) {
    try {
      out.push_back(token_id(x, "input_ids"));
    } catch (const Error& e) {
      throw HttpError(400, e.what(), "", "input_ids");
    }
  }
  return out;
}

PromptInput predict_text(const json& v) {
  if (!v.is_string()) throw HttpError(400, "'prompt' must be a string", "", "prompt");
  return {true, v.get<std::string>(), {}};
}

// One instance: a prompt string, a list of ids, or an object with "prompt" or "input_ids" and
// parameters (shared: the columnar format's parameters, for every prompt).
CompletionRequest predict_instance(const json& inst, const json& shared) {
  CompletionRequest r;
  json params = shared.is_object() ? shared : json::object();
  if (inst.is_string()) {
    r.prompts.push_back(predict_text(inst));
  } else if (inst.is_array()) {
    r.prompts.push_back({false, {}, predict_ids(inst)});
  } else if (inst.is_object()) {
    const bool text = inst.contains("prompt"), ids = inst.contains("input_ids");
    if (text == ids)
      throw HttpError(400, "each instance needs exactly one of 'prompt' or 'input_ids'");
    r.prompts.push_back(text ? predict_text(inst["prompt"])
                             : PromptInput{false, {}, predict_ids(inst["input_ids"])});
    for (const auto& [k, v] : inst.items()) {
      if (k == "prompt" || k == "input_ids") continue;
      if (!kPredictParams.count(k)) throw HttpError(400, fmt::format("unknown input '{}'", k));
      params[k] = v;
    }
  } else {
    throw HttpError(400, "an instance must be a prompt string, a list of token ids or an object");
  }
  try {
    r.params = parse_sampling_params(params, false, 16);
    apply_request_rules(r, false);
  } catch (const FieldError& e) {
    throw HttpError(400, e.what(), "", e.field());
  }
  // An instance's default max_tokens is the completions default, not the context: given.
  r.max_tokens_given = true;
  return r;
}

// Which signature a Predict payload is written for (PredictInput's rule): true for the generate
// signature. An input of each kind is a 400 naming both.
bool is_generate_request(const json& payload, bool rows, const std::string& signature) {
  std::string generate_input, tokenflow_input;
  auto look = [&](const json& obj) {
    if (!obj.is_object()) {
      tokenflow_input = "a prompt";  // a string or a list of ids: tokenflow's forms
      return;
    }
    for (const auto& [k, v] : obj.items()) {
      if (is_generate_only_input(k)) {
        if (generate_input.empty()) generate_input = k;
      } else if (k == "prompt" || (kPredictParams.count(k) && !is_generate_setting(k))) {
        if (tokenflow_input.empty()) tokenflow_input = k;
      }
    }
  };
  if (rows) {
    for (const auto& inst : payload) look(inst);
  } else {
    look(payload);
  }
  if (!generate_input.empty() && !tokenflow_input.empty())
    throw HttpError(400, fmt::format("'{}' is an input of the generate signature and '{}' one of "
                                     "tokenflow's: a request is written for one signature",
                                     generate_input, tokenflow_input));
  if (!generate_input.empty()) return true;
  if (!tokenflow_input.empty()) return false;
  return !signature.empty() && signature != "serving_default" && signature != kTokenflowSignature;
}

}  // namespace

PredictInput read_predict_body(const json& body, bool log_prompt) {
  PredictInput out;
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  if (body.contains("signature_name")) {
    if (!body["signature_name"].is_string())
      throw HttpError(400, "'signature_name' must be a string", "", "signature_name");
    out.signature_name = body["signature_name"].get<std::string>();
  }
  for (const auto& [k, v] : body.items()) {
    if (k != "instances" && k != "inputs" && k != "signature_name")
      throw HttpError(400, fmt::format("unknown key '{}' (expected 'instances' or 'inputs')", k));
  }
  const bool rows = body.contains("instances"), columns = body.contains("inputs");
  if (rows == columns) {
    throw HttpError(400, rows ? "Request body must have either 'instances' or 'inputs', not both"
                              : "Missing 'instances' or 'inputs' key");
  }
  out.rows = rows;
  if (rows && (!body["instances"].is_array() || body["instances"].empty()))
    throw HttpError(400, "'instances' must be a non-empty list");
  if (is_generate_request(rows ? body["instances"] : body["inputs"], rows, out.signature_name)) {
    out.generate =
        rows ? read_generate_rows(body["instances"]) : read_generate_columns(body["inputs"]);
    if (log_prompt) out.logged_prompt = dump_json(rows ? body["instances"] : body["inputs"]);
    return out;
  }
  if (rows) {
    const json& inst = body["instances"];
    for (const auto& i : inst) out.instances.push_back(predict_instance(i, json()));
  } else {
    const json& in = body["inputs"];
    json shared = json::object();
    json prompts;
    if (in.is_object()) {
      for (const auto& [k, v] : in.items()) {
        if (k == "prompt" || k == "input_ids") continue;
        if (!kPredictParams.count(k)) throw HttpError(400, fmt::format("unknown input '{}'", k));
        shared[k] = v;
      }
      const bool text = in.contains("prompt"), ids = in.contains("input_ids");
      if (text == ids)
        throw HttpError(400, "'inputs' needs exactly one of 'prompt' or 'input_ids'");
      if (text) {
        prompts = in["prompt"].is_array() ? in["prompt"] : json::array({in["prompt"]});
      } else {
        const json& v = in["input_ids"];
        prompts = v.is_array() && !v.empty() && v[0].is_array() ? v : json::array({v});
        for (auto& p : prompts) p = json{{"input_ids", p}};
      }
    } else {
      prompts = in.is_array() ? in : json::array({in});
    }
    if (prompts.empty()) throw HttpError(400, "'inputs' holds no prompt");
    for (const auto& p : prompts) out.instances.push_back(predict_instance(p, shared));
  }
  if (log_prompt) out.logged_prompt = dump_json(rows ? body["instances"] : body["inputs"]);
  return out;
}

}  // namespace tf
