#include "serving/core/planner.h"

#include <fmt/format.h>

#include "chat/reasoning.h"
#include "core/cancel.h"
#include "sampling/grammar.h"
#include "serving/core/prompt.h"
#include "serving/core/request_fields.h"
#include "serving/models/model_tasks.h"

namespace tf {
namespace {

// Runs fn, turning a parameter's FieldError (or a plain Error) into HttpError 400 naming the
// field as the client named it.
template <typename Fn>
void with_fields(const CompletionRequest& req, Fn fn) {
  as_bad_request(fn, [&](const std::string& field) {
    return field == "max_tokens" ? req.max_tokens_field : field;
  });
}

std::vector<int32_t> encode(const PromptInput& p, const CompletionRequest& req,
                            const LoadedTokenizer& tokenizer, const ModelConfig& cfg) {
  if (!p.is_text) return p.ids;
  if (!tokenizer.tokenizer) fail("this model has no tokenizer: send the prompt as token ids");
  auto ids = encode_prompt(*tokenizer.tokenizer, p.text, req.add_special_tokens, cfg.max_seq_len,
                           "prompt");
  if (ids.empty()) fail_field("prompt", "'prompt' must not be empty");
  return ids;
}

// A marker's ids as the model writes it inside its output: without the lone space a
// SentencePiece tokenizer puts before a text's first piece.
std::vector<int32_t> encode_marker(const Tokenizer& tok, std::string_view text) {
  std::vector<int32_t> ids = tok.encode(text, false);
  if (ids.size() > 1 && !text.empty() && text.front() != ' ' &&
      tok.decode(std::span<const int32_t>(ids.data(), 1), false) == " ")
    ids.erase(ids.begin());
  return ids;
}

}  // namespace

GenerationPlan plan_request(
    const CompletionRequest& req, const LoadedTokenizer& tokenizer, const ModelConfig& cfg,
    const std::string& id, int32_t default_max_tokens,
    const std::function<std::shared_ptr<const GrammarVocab>()>& grammar_vocab,
    std::shared_ptr<const ChatFormat> chat) {
  GenerationPlan p;
  with_fields(req, [&] {
    p.params = req.params;
    // The default max_tokens: 16 for completions (OpenAI's), the context for chat; lowered to
    // the room the prompt leaves below.
    if (!req.max_tokens_given)
      p.params.max_tokens = default_max_tokens > 0       ? default_max_tokens
                            : req.default_max_tokens > 0 ? req.default_max_tokens
                            : req.chat                   ? static_cast<int32_t>(cfg.max_seq_len)
                                                         : 16;
    p.stream = req.stream;
    p.include_usage = req.include_usage;
    p.echo = req.echo;
    p.prompt_logprobs = req.prompt_logprobs;
    p.max_tokens_given = req.max_tokens_given;
    p.choices_per_prompt = p.params.n;
    p.rule = {p.params.n, p.params.best_of, p.params.beam_search()};
    p.params.validate(cfg.vocab_size);
    if (req.chat) {
      if (req.messages.empty()) fail_field("messages", "'messages' must be a non-empty list");
      if (!chat) chat = ChatFormat::for_model(tokenizer, cfg);
      std::string rendered;
      p.prompts.push_back(render_chat_prompt(
          *chat, req.messages, req.add_generation_prompt, tokenizer, cfg.max_seq_len,
          req.chat_template_kwargs,
          req.tools.names.empty() ? nlohmann::ordered_json() : req.tools.tools, &rendered));
      // Harmony (gpt-oss): the channels' markers are special tokens the answer is split by, so
      // the output keeps them; reasoning and calls come from the channels.
      const bool harmony = chat->tool_format() == ToolFormat::kHarmony;
      if (harmony) {
        p.params.skip_special_tokens = false;
        p.tool_format = ToolFormat::kHarmony;
      }
      if (chat->reasons()) {
        p.reasoning = true;
        p.thinking_opened =
            harmony ? rendered.ends_with(kHarmonyAnalysisOpen) : prompt_opens_thinking(rendered);
        if (req.thinking_budget && tokenizer.tokenizer && !p.params.beam_search()) {
          // The block's markers as this vocabulary writes them; the forced close ends the
          // thought on a line of its own, as the templates write it (harmony: ends the
          // analysis message and opens the final one).
          auto& t = p.params.thinking;
          const Tokenizer& tok = *tokenizer.tokenizer;
          t.tokens = *req.thinking_budget;
          if (!p.thinking_opened)
            t.start = encode_marker(tok, harmony ? kHarmonyAnalysisOpen : kThinkStart);
          t.close = encode_marker(tok, harmony ? kHarmonyAnalysisClose : kThinkEnd);
          t.end = encode_marker(
              tok, harmony ? std::string(kHarmonyToFinal) : fmt::format("\n{}\n\n", kThinkEnd));
        }
      }
      if (req.tools.active()) {
        p.tools = std::make_shared<const ToolRequest>(req.tools);
        p.tool_format = chat->tool_format();
      }
    } else {
      if (req.prompts.empty()) fail_field("prompt", "'prompt' is required");
      for (const auto& prompt : req.prompts)
        p.prompts.push_back(encode(prompt, req, tokenizer, cfg));
    }
  });
  if (req.output.kind != OutputConstraint::kNone || (p.tools && req.tools.forced())) {
    const bool tool = req.output.kind == OutputConstraint::kNone;
    const std::string field = tool ? "tool_choice" : req.output.field;
    if (p.params.beam_search())
      throw HttpError(400, fmt::format("'{}' with beam search is not supported", field), "", field);
    // Harmony's constrained part is a message of its own (the call's header, or the final
    // channel's answer), after the thought the model may write first. A GBNF grammar is the
    // whole output, as llama.cpp's: it names the channels' markers as tokens (<|channel|>).
    const bool in_final =
        p.tool_format == ToolFormat::kHarmony && req.output.kind != OutputConstraint::kGrammar;
    const bool open = p.tool_format == ToolFormat::kHarmony && p.thinking_opened;
    const std::string gbnf = tool       ? tool_call_grammar(req.tools, p.tool_format, open)
                             : in_final ? harmony_final_grammar(output_grammar(req.output), open)
                                        : output_grammar(req.output);
    if (grammar_vocab) p.params.grammar_vocab = grammar_vocab();
    if (!p.params.grammar_vocab && tokenizer.tokenizer)
      p.params.grammar_vocab = GrammarVocab::of(*tokenizer.tokenizer);
    if (!p.params.grammar_vocab)
      throw HttpError(
          400, fmt::format("'{}' needs the model's tokenizer, and this model has none", field), "",
          field);
    try {
      p.params.grammar = p.params.grammar_vocab->compile(gbnf);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInternal) throw;
      throw HttpError(400, fmt::format("'{}': {}", field, e.what()), "", field);
    }
  }
  int64_t ctx = cfg.max_seq_len;
  if (req.context_limit) {
    if (*req.context_limit < 1 || *req.context_limit > ctx)
      throw HttpError(400,
                      fmt::format("'{}' must be from 1 to the model's context length, {}",
                                  req.context_limit_field, ctx),
                      "", req.context_limit_field);
    ctx = *req.context_limit;
  }
  const char* prompt_field = req.chat ? "messages" : "prompt";
  // An encoder-decoder's prompt is its encoder's input: up to the whole context (its output
  // has the decoder's).
  const bool encoder_decoder = cfg.encoder_decoder();
  for (auto& prompt : p.prompts) {
    if (static_cast<int64_t>(prompt.size()) >= ctx + (encoder_decoder ? 1 : 0)) {
      throw HttpError(400,
                      fmt::format("This model's maximum context length is {} tokens, the prompt "
                                  "has {} tokens",
                                  ctx, prompt.size()),
                      "context_length_exceeded", prompt_field);
    }
  }
  for (const auto& prompt : p.prompts) {
    for (int32_t t : prompt) {
      if (t < 0 || t >= cfg.vocab_size)
        throw HttpError(400,
                        fmt::format("prompt token id {} is outside the vocabulary (0..{})", t,
                                    cfg.vocab_size - 1),
                        "", prompt_field);
    }
  }
  for (size_t i = 0; i < p.prompts.size(); ++i) {
    GenerationRequest r;
    r.id = p.prompts.size() == 1 ? id : fmt::format("{}-{}", id, i);
    r.prompt = p.prompts[i];
    r.params = p.params;
    r.priority = req.priority;
    r.speculate = req.speculative;
    // Completions' echo with logprobs shows the prompt's logprobs (as many alternatives as the
    // output's), vLLM's prompt_logprobs its own count: the larger serves both.
    if (req.prompt_logprobs || (req.echo && p.params.logprobs))
      r.prompt_logprobs =
          std::max(req.prompt_logprobs.value_or(0), req.echo ? p.params.logprobs.value_or(0) : 0);
    // An encoder-decoder's output has the decoder's whole context, its start token aside.
    const size_t decoder_prompt = encoder_decoder ? 1 : r.prompt.size();
    const int64_t room = fit_max_tokens(r.params, decoder_prompt, ctx, req.max_tokens_given);
    if (static_cast<int64_t>(r.params.max_tokens) > room) {
      throw HttpError(400,
                      fmt::format("This model's maximum context length is {} tokens; the prompt "
                                  "({} tokens) and max_tokens ({}) exceed it",
                                  ctx, r.prompt.size(), r.params.max_tokens),
                      "context_length_exceeded", req.max_tokens_field);
    }
    p.requests.push_back(std::move(r));
  }
  return p;
}

namespace {

// The adapter a model field names: its own name ("sql-lora"), or "BASE@ADAPTER" where ADAPTER is
// an adapter of BASE and not one of BASE's version labels (a label keeps its meaning).
std::optional<LoraSpec> adapter_named(ServingState& state, const std::string& name) {
  if (auto l = state.registry.loras().find(name)) return l;
  const size_t at = name.rfind('@');
  if (at == std::string::npos) return std::nullopt;
  const std::string base = name.substr(0, at), adapter = name.substr(at + 1);
  auto l = state.registry.loras().find(adapter);
  if (!l || state.registry.parse_model_field(l->base).name != base ||
      state.registry.labels(base).contains(adapter))
    return std::nullopt;
  return l;
}

}  // namespace

std::shared_ptr<ServedModel> resolve_model(ServingState& state, const RequestRecord& record,
                                           const std::string& name, const std::string& user,
                                           const ModelRegistry::HeaderFn& header,
                                           std::shared_ptr<const LoraAdapter>* lora,
                                           std::optional<int64_t> base_version,
                                           std::optional<std::string> base_label) {
  if (const std::optional<LoraSpec> l = adapter_named(state, name)) {
    // An adapter: its own name is what an API key must allow; then its base, as the base's
    // own requests get it.
    state.require_model_access(record, l->name);
    if (lora == nullptr)
      throw HttpError(400,
                      fmt::format("'{}' is a LoRA adapter of '{}': it generates (chat, "
                                  "completions), this route takes models",
                                  l->name, l->base),
                      "", "model");
    ModelRequestSpec base = state.registry.parse_model_field(l->base);
    if (base_version || base_label) {
      base.version = base_version;
      base.label = base_label;
    }
    auto model = state.registry.resolve(base, user, header);
    if (!model)
      throw HttpError(
          404,
          fmt::format("LoRA adapter '{}': its base model '{}' is not available", l->name, l->base),
          "model_not_found", "model");
    try {
      *lora = model->lora(l->path);
    } catch (const Error& e) {
      throw HttpError(500, fmt::format("LoRA adapter '{}' cannot be loaded: {}", l->name, e.what()),
                      "", "model");
    }
    return model;
  }
  // "name", "name:version" or "name@label"; a traffic split keeps one "user" on one version.
  const ModelRequestSpec spec = state.registry.parse_model_field(name);
  if (!spec.name.empty()) state.require_model_access(record, spec.name);  // before the lookup
  auto model = state.registry.resolve(spec, user, header);
  if (!model) {
    throw HttpError(404, state.registry.unavailable_reason(spec), "model_not_found", "model");
  }
  state.require_model_access(record, model->name);  // the default model, when none was named
  return model;
}

GenerationPlan plan_generation(ServingState& state, const CompletionRequest& req,
                               const ModelRegistry::HeaderFn& header, RequestRecord& record,
                               const std::string& id,
                               std::optional<std::chrono::milliseconds> time_limit) {
  // The deadline: the request's own timeout, else the caller's, within the server's.
  const auto limit =
      std::min(req.timeout.value_or(time_limit.value_or(state.limits.max_request_time)),
               state.limits.max_request_time);
  // Preparing the prompt (below) stops at that deadline too.
  if (CancelToken* token = current_cancel_token()) token->limit_deadline(record.received + limit);
  std::shared_ptr<const LoraAdapter> lora;
  auto model = resolve_model(state, record, req.model, req.user, header, &lora);
  require_task(*model, ModelTask::kGenerate);
  GenerationPlan p = plan_request(
      req, model->tokenizer, model->config(), id, 0,
      [m = model.get()] { return m->grammar_vocab(); }, model->chat);
  p.model = std::move(model);
  p.lora = lora;
  for (auto& r : p.requests) r.lora = lora;
  // An adapter's requests are its own in the logs and metrics (its name, however it was named).
  p.name = p.model->name;
  if (lora) {
    const std::optional<LoraSpec> l = adapter_named(state, req.model);
    p.name = l ? l->name : req.model;
  }
  record.model = p.name;
  record.version = p.model->version;
  if (logs_prompts(record)) record.prompt = req.logged_prompt;
  p.admission =
      state.prepare(record, p.name, p.requests, p.max_tokens_given, limit, req.cache_salt);
  p.time_limit = limit;
  for (const auto& r : p.requests) record.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  return p;
}

}  // namespace tf
