#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace tf {

struct ChatTemplate::Parsed {
  jinja::Body body;
};

namespace {

[[noreturn]] void rethrow(const jinja::TemplateError& e, int line) {
  if (e.verbatim() || line <= 0) throw Error(e.kind(), std::string("chat template: ") + e.what());
  throw Error(e.kind(), fmt::format("chat template: {} at line {}", e.what(), line));
}

template <typename Json>
std::string render_json(const jinja::Body& body, const Json& context,
                        const ChatTemplateLimits& limits) {
  if (!context.is_object()) {
    fail("chat template: the render context must be a JSON object, not {}", context.type_name());
  }
  jinja::Limits l;
  l.max_output_bytes = limits.max_output_bytes;
  l.max_steps = limits.max_steps;
  l.max_depth = limits.max_depth;
  std::unique_ptr<jinja::Interpreter> in;
  try {
    jinja::Value ctx = jinja::Value::from_json(context);
    in = std::make_unique<jinja::Interpreter>(l, jinja::make_globals(), ctx.as_dict());
    return in->render(body);
  } catch (const jinja::TemplateError& e) {
    rethrow(e, in ? in->line() : 0);
  }
}

// The templates these model families ship, byte for byte, for checkpoints that come without one.
// (Where the shipped JSON holds a newline inside a Jinja string literal, so does the C++ string.)
struct Builtin {
  const char* name;
  const char* source;
};

constexpr const char* kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
    "'<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == "
    "'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif "
    "%}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif "
    "%}\n{% endfor %}";

constexpr Builtin kBuiltins[] = {
    // transformers' ChatML default.
    {"chatml",
     R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})"},
    // meta-llama/Llama-2-7b-chat-hf.
    {"llama2",
     R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})"},
    // meta-llama/Meta-Llama-3-8B-Instruct.
    {"llama3",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
     "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
     "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"},
    // mistralai/Mistral-7B-Instruct-v0.2 (system message folded into the first user turn).
    {"mistral",
     R"({%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
)"},
    // HuggingFaceH4/zephyr-7b-beta.
    {"zephyr", kZephyr},
    // google/gemma-7b-it (raises on a system message, as the original does).
    {"gemma",
     "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
     "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
     "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
     "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}"
     "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
     "'<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
     "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"},
    // TinyLlama/TinyLlama-1.1B-Chat-v1.0 uses zephyr's format.
    {"tinyllama", kZephyr},
};

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}

ChatTemplate ChatTemplate::parse(std::string_view source) {
  auto parsed = std::make_shared<Parsed>();
  try {
    parsed->body = jinja::parse_template(source);
  } catch (const jinja::TemplateError& e) {
    rethrow(e, 0);  // parse errors carry their line already
  }
  return ChatTemplate(std::move(parsed));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 const ChatTemplateLimits& limits) const {
  return render_json(parsed_->body, context, limits);
}

std::string ChatTemplate::render(const nlohmann::json& context,
                                 const ChatTemplateLimits& limits) const {
  return render_json(parsed_->body, context, limits);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token) const {
  nlohmann::ordered_json context;
  context["messages"] = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    context["messages"].push_back({{"role", m.role}, {"content", m.content}});
  }
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  return render(context);
}

std::string builtin_chat_template(std::string_view family) {
  for (const Builtin& b : kBuiltins) {
    if (family == b.name) return b.source;
  }
  std::string known;
  for (const std::string& name : builtin_chat_template_names()) {
    known += (known.empty() ? "" : ", ") + name;
  }
  fail(ErrorKind::kNotFound, "no built-in chat template for '{}' (known: {})", family, known);
}

std::vector<std::string> builtin_chat_template_names() {
  std::vector<std::string> names;
  for (const Builtin& b : kBuiltins) names.emplace_back(b.name);
  return names;
}

}  // namespace tf
