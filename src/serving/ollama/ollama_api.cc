#include "serving/ollama/ollama_api.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <optional>

#include "chat/output_stream.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "core/random_id.h"
#include "serving/core/embedding_plan.h"
#include "serving/core/job_lifecycle.h"
#include "serving/core/planner.h"
#include "serving/core/prompt.h"
#include "serving/models/model_tasks.h"
#include "serving/ollama/ollama_request.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// RFC 3339 with nanoseconds, UTC, as Go's time.Time marshals (Ollama's created_at).
std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(ns.count() / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ns.count() % 1'000'000'000);
}
std::string now_rfc3339() {
  return rfc3339(std::chrono::system_clock::now());
}

// The model field as the registry reads it (name:tag resolved).
std::string registry_field(const ServingState& state, const std::string& name) {
  return ollama_model_field(name, [&state](const std::string& model, const std::string& label) {
    return state.registry.labels(model).count(label) > 0;
  });
}

// What the answer's lines need of the plan, kept past the job's start.
struct OllamaShape {
  std::string model;  // as the client named it (Ollama echoes it)
  bool chat = false;  // /api/chat: "message"; /api/generate: "response"
  ChatAnswerShape answer;
  bool logprobs = false;  // asked for: each line carries its tokens'
  const Tokenizer* tokenizer = nullptr;
  std::vector<int32_t> prompt;  // /api/generate: the answer's "context" starts with it
  Clock::time_point received;
};

ojson tool_calls_json(const std::vector<ToolCall>& calls) {
  ojson out = ojson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    ojson args = ojson::parse(calls[i].arguments, nullptr, false);
    if (!args.is_object()) args = ojson::object();
    out.push_back({{"id", calls[i].id},
                   {"function", {{"index", i}, {"name", calls[i].name}, {"arguments", args}}}});
  }
  return out;
}

int64_t ns(double ms) {
  return static_cast<int64_t>(ms * 1e6);
}

// The last line's fields: done, done_reason, the counts and durations (nanoseconds).
void finish_line(ojson& line, const OllamaShape& s, const JobSummary& summary) {
  const double total_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - s.received).count();
  const double prompt_ms = summary.ttft_ms >= 0 ? summary.ttft_ms : total_ms;
  line["done"] = true;
  line["done_reason"] = summary.finish == "length" ? "length" : "stop";
  line["total_duration"] = ns(total_ms);
  line["load_duration"] = 0;  // the model was loaded before the request came
  line["prompt_eval_count"] = summary.prompt_tokens;
  line["prompt_eval_duration"] = ns(prompt_ms);
  line["eval_count"] = summary.completion_tokens;
  line["eval_duration"] = ns(std::max(0.0, total_ms - prompt_ms));
}

ojson line_head(const OllamaShape& s) {
  return {{"model", s.model}, {"created_at", now_rfc3339()}};
}

// A streamed or whole answer's text as a line's fields.
void put_text(ojson& line, const OllamaShape& s, const std::string& content,
              const std::string& thinking, const std::vector<ToolCall>& calls) {
  if (s.chat) {
    ojson msg = {{"role", "assistant"}, {"content", content}};
    if (!thinking.empty()) msg["thinking"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = tool_calls_json(calls);
    line["message"] = msg;
  } else {
    line["response"] = content;
    if (!thinking.empty()) line["thinking"] = thinking;
  }
}

class OllamaWholeSink final : public JobSink {
 public:
  OllamaWholeSink(std::shared_ptr<const OllamaShape> shape,
                  std::shared_ptr<HttpResponder> responder)
      : shape_(std::move(shape)), responder_(std::move(responder)) {}
  void end(const JobEnd& end, const GenerationJob& job) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    if (!end.ok()) return responder_->send(http_status(end), ollama_error_body(end.error().what()));
    const OllamaShape& s = *shape_;
    const CompletedSequence& seq = job.results().at(0).at(0);
    const ChatAnswerShape::Whole w = s.answer.split(seq.text);
    ojson line = line_head(s);
    put_text(line, s, w.content.value_or(""), w.reasoning.value_or(""), w.calls);
    if (s.logprobs) line["logprobs"] = token_logprobs_json(s.tokenizer, seq.logprobs);
    finish_line(line, s, end.summary);
    if (!s.chat) {
      std::vector<int32_t> context = s.prompt;
      context.insert(context.end(), seq.tokens.begin(), seq.tokens.end());
      line["context"] = context;
    }
    responder_->send(200, dump_json(line));
  }

 private:
  std::shared_ptr<const OllamaShape> shape_;
  std::shared_ptr<HttpResponder> responder_;
};

// NDJSON: a line per settled piece of text (content or thinking), the tool calls in one line
// when the answer is complete, then the done line.
class OllamaStreamSink final : public JobSink {
 public:
  OllamaStreamSink(std::shared_ptr<const OllamaShape> shape,
                   std::shared_ptr<HttpResponder> responder)
      : shape_(std::move(shape)),
        responder_(std::move(responder)),
        split_(shape_->answer.stream()) {}

  void start() { responder_->start_stream(200, "application/x-ndjson"); }

  void output(size_t, const RequestOutput& out) override {
    std::lock_guard lock(mu_);
    if (out.index == 0) tokens_.insert(tokens_.end(), out.token_ids.begin(), out.token_ids.end());
    ChatOutputStream::Delta d = split_.push(out.text, out.finish != FinishReason::kNone);
    if (!d.calls.empty()) calls_ = std::move(d.calls);
    if (shape_->logprobs)
      for (auto& lp : token_logprobs_json(shape_->tokenizer, out.logprobs))
        logprobs_.push_back(std::move(lp));
    if (d.reasoning.empty() && d.content.empty()) return;
    ojson line = line_head(*shape_);
    put_text(line, *shape_, d.content, d.reasoning, {});
    take_logprobs(line);
    line["done"] = false;
    write(line);
  }

  void end(const JobEnd& end, const GenerationJob&) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    std::lock_guard lock(mu_);
    if (end.outcome == JobOutcome::kFailed) {
      write(ojson{{"error", end.summary.error}});
      return responder_->end();
    }
    if (!calls_.empty()) {
      ojson line = line_head(*shape_);
      put_text(line, *shape_, "", "", calls_);
      line["done"] = false;
      write(line);
    }
    ojson line = line_head(*shape_);
    put_text(line, *shape_, "", "", {});
    take_logprobs(line);  // of tokens whose text never showed (a stop string's)
    finish_line(line, *shape_, end.summary);
    if (end.outcome == JobOutcome::kTimedOut) line["error"] = end.error().what();
    if (!shape_->chat) {
      std::vector<int32_t> context = shape_->prompt;
      context.insert(context.end(), tokens_.begin(), tokens_.end());
      line["context"] = context;
    }
    write(line);
    responder_->end();
  }

  bool answers_start_failure() const override { return true; }
  void start_failed(const std::exception& e) override {
    write(ojson{{"error", e.what()}});
    responder_->end();
  }

 private:
  void write(const ojson& line) { responder_->write(dump_json(line) + "\n"); }
  // The logprobs of the tokens behind the text a line shows (held back with their text).
  void take_logprobs(ojson& line) {
    if (!shape_->logprobs) return;
    line["logprobs"] = std::move(logprobs_);
    logprobs_ = ojson::array();
  }

  std::shared_ptr<const OllamaShape> shape_;
  std::shared_ptr<HttpResponder> responder_;
  ChatOutputStream split_;
  std::vector<ToolCall> calls_;
  std::vector<int32_t> tokens_;
  ojson logprobs_ = ojson::array();
  std::mutex mu_;
};

// Ollama's "load the model" call (no prompt, no messages): the model is resolved (404 if none)
// and the answer is done at once.
void answer_load(ServingState& state, const HttpRequest& req, HttpResponder& responder,
                 RequestRecord& record, const OllamaRequest& o, const std::string& sent_model) {
  auto model = resolve_model(state, record, o.request.model, "", req.header_lookup());
  record.model = model->name;
  record.version = model->version;
  ojson line = {{"model", sent_model}, {"created_at", now_rfc3339()}};
  if (o.request.chat && o.request.messages.empty())
    line["message"] = {{"role", "assistant"}, {"content", ""}};
  else
    line["response"] = "";
  line["done"] = true;
  line["done_reason"] = "load";
  log_request(record, 200);
  responder.add_header("X-Model-Version", std::to_string(model->version));
  responder.send(200, dump_json(line) + (o.request.stream ? "\n" : ""),
                 o.request.stream ? "application/x-ndjson" : "application/json");
}

void run_generation(ServingState& state, const HttpRequest& req,
                    std::shared_ptr<HttpResponder> responder, std::shared_ptr<RequestRecord> record,
                    OllamaRequest o, bool chat_door) {
  const std::string sent_model = o.request.model;
  o.request.model = registry_field(state, sent_model);
  if (o.load_only) return answer_load(state, req, *responder, *record, o, sent_model);
  auto plan = std::make_shared<GenerationPlan>(
      plan_generation(state, o.request, req.header_lookup(), *record, random_id("ollama-")));
  responder->add_header("X-Model-Version", std::to_string(plan->model->version));
  auto shape = std::make_shared<OllamaShape>();
  shape->model = sent_model;
  shape->chat = chat_door;
  shape->answer = plan->answer_shape();
  shape->logprobs = plan->params.logprobs.has_value();
  shape->tokenizer = plan->model->tok();
  if (!chat_door) shape->prompt = plan->requests.at(0).prompt;
  shape->received = record->received;
  if (plan->stream) {
    auto sink = std::make_shared<OllamaStreamSink>(shape, responder);
    sink->start();
    run_job(state, plan, responder, record, sink);
    return;
  }
  run_job(state, plan, responder, record, std::make_shared<OllamaWholeSink>(shape, responder));
}

std::string lower_family(const ServedModel& m) {
  std::string a = m.config().architecture;
  for (const char* suffix : {"ForCausalLM", "LMHeadModel", "ForConditionalGeneration", "Model"}) {
    const std::string s = suffix;
    if (a.size() > s.size() && a.compare(a.size() - s.size(), s.size(), s) == 0) {
      a.resize(a.size() - s.size());
      break;
    }
  }
  if (a.empty()) a = arch_name(m.config().arch);
  for (char& c : a) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return a;
}

std::string format_of(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".gguf") return "gguf";
  if (ext == ".bin") return "llama2c";
  if (ext == ".safetensors") return "safetensors";
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string x = e.path().extension().string();
      if (x == ".safetensors") return "safetensors";
      if (x == ".gguf") return "gguf";
      if (x == ".h5") return "tensorflow";
      if (e.path().filename() == "saved_model.pb") return "tensorflow";
    }
  }
  return "unknown";
}

int64_t size_on_disk(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return static_cast<int64_t>(fs::file_size(path, ec));
  int64_t sum = 0;
  if (fs::is_directory(path, ec))
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) sum += static_cast<int64_t>(e.file_size(ec));
  return sum;
}

std::string digest_of(const ServedModel& m) {
  const std::string id = fmt::format("{}:{}:{}:{}", m.name, m.version, m.path, m.created);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(id.data(), id.size(), out, &len, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", out[i]);
  return hex;
}

ojson tag_entry(const ServedModel& m, const std::string& name, bool running) {
  ojson e = {{"name", name}, {"model", name}};
  if (!running) e["modified_at"] = rfc3339(std::chrono::system_clock::from_time_t(m.created));
  e["size"] = size_on_disk(m.path);
  e["digest"] = digest_of(m);
  e["details"] = ollama_details(m);
  if (running) {
    // Loaded until the config says otherwise: Ollama's "never" is the zero time far ahead.
    e["expires_at"] = "2318-01-01T00:00:00Z";
    e["size_vram"] = 0;
    e["context_length"] = m.config().max_seq_len;
  }
  return e;
}

}  // namespace

std::string ollama_error_body(const std::string& message) {
  return dump_json(ojson{{"error", message}});
}

std::string ollama_parameter_size(int64_t n) {
  const auto with = [](double v, const char* unit) {
    std::string s = v >= 10 ? fmt::format("{:.0f}", v) : fmt::format("{:.1f}", v);
    if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
    return s + unit;
  };
  if (n >= 1'000'000'000) return with(static_cast<double>(n) / 1e9, "B");
  if (n >= 1'000'000) return with(static_cast<double>(n) / 1e6, "M");
  if (n >= 1'000) return with(static_cast<double>(n) / 1e3, "K");
  return std::to_string(n);
}

ojson ollama_details(const ServedModel& m) {
  const auto& w = m.model->weights();
  std::string quant;
  if (w.compute_type() != kernels::WeightType::kF32) {
    quant = kernels::weight_type_name(w.compute_type());
    for (char& c : quant) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  } else {
    quant = w.stored_type();
  }
  const std::string family = lower_family(m);
  return {{"parent_model", ""},
          {"format", format_of(m.path)},
          {"family", family},
          {"families", {family}},
          {"parameter_size", ollama_parameter_size(m.model->parameter_count())},
          {"quantization_level", quant}};
}

void handle_ollama_chat(ServingState& state, const HttpRequest& req,
                        std::shared_ptr<HttpResponder> responder,
                        std::shared_ptr<RequestRecord> record) {
  const ojson ordered = parse_ordered_json_body(req.body);  // parsed once
  OllamaRequest o = read_ollama_chat(json(ordered), ordered, logs_prompts(*record));
  run_generation(state, req, std::move(responder), std::move(record), std::move(o), true);
}

void handle_ollama_generate(ServingState& state, const HttpRequest& req,
                            std::shared_ptr<HttpResponder> responder,
                            std::shared_ptr<RequestRecord> record) {
  const ojson ordered = parse_ordered_json_body(req.body);  // parsed once
  OllamaRequest o = read_ollama_generate(json(ordered), ordered, logs_prompts(*record));
  run_generation(state, req, std::move(responder), std::move(record), std::move(o), false);
}

void handle_ollama_embed(ServingState& state, const HttpRequest& req,
                         std::shared_ptr<HttpResponder> responder,
                         std::shared_ptr<RequestRecord> record, bool legacy) {
  const json body = parse_json_body(req.body);
  const OllamaEmbedRequest e = read_ollama_embed(body, legacy);
  auto model =
      resolve_model(state, *record, registry_field(state, e.model), "", req.header_lookup());
  record->model = model->name;
  record->version = model->version;
  const std::optional<int64_t> dims = checked_dimensions(*model, e.dimensions);
  auto plan = plan_embeddings(state, model, e.inputs, *record, random_id("ollama-embd-"));
  responder->add_header("X-Model-Version", std::to_string(model->version));
  const std::string sent = e.model;
  const Clock::time_point received = record->received;
  const bool legacy_shape = e.legacy;
  class OllamaEmbedSink final : public JobSink {
   public:
    OllamaEmbedSink(std::shared_ptr<HttpResponder> r, std::string model, Clock::time_point received,
                    bool legacy, std::optional<int64_t> dims)
        : responder_(std::move(r)),
          model_(std::move(model)),
          received_(received),
          legacy_(legacy),
          dims_(dims) {}
    void end(const JobEnd& end, const GenerationJob& job) override {
      if (end.outcome == JobOutcome::kClientGone) return;
      if (!end.ok())
        return responder_->send(http_status(end), ollama_error_body(end.error().what()));
      if (legacy_) {  // /api/embeddings: the vector as the model gives it
        return responder_->send(
            200, dump_json(ojson{{"embedding", job.results().at(0).at(0).embedding}}));
      }
      ojson vectors = ojson::array();
      for (const auto& r : job.results()) {
        std::vector<float> v = r.at(0).embedding;
        shape_embedding(v, dims_, true);  // Ollama's /api/embed vectors are unit length
        vectors.push_back(v);
      }
      const double total_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - received_).count();
      responder_->send(200, dump_json(ojson{{"model", model_},
                                            {"embeddings", vectors},
                                            {"total_duration", ns(total_ms)},
                                            {"load_duration", 0},
                                            {"prompt_eval_count", end.summary.prompt_tokens}}));
    }

   private:
    std::shared_ptr<HttpResponder> responder_;
    std::string model_;
    Clock::time_point received_;
    bool legacy_;
    std::optional<int64_t> dims_;
  };
  run_job(state, plan, responder, record,
          std::make_shared<OllamaEmbedSink>(responder, sent, received, legacy_shape, dims));
}

void handle_ollama_tags(ServingState& state, std::shared_ptr<HttpResponder> responder,
                        RequestRecord& record, bool running) {
  // Each model as name:latest (its default version), then each version as name:N where it has
  // several, and each label as name:label: the names this door resolves back.
  ojson models = ojson::array();
  const auto available = state.registry.available();
  for (const std::string& name : state.registry.names()) {
    if (record.key && !record.key->allows(name)) continue;
    std::vector<std::shared_ptr<ServedModel>> versions;
    for (const auto& m : available)
      if (m->name == name) versions.push_back(m);
    if (versions.empty()) continue;
    if (auto def = state.registry.resolve({name, {}, {}}))
      models.push_back(tag_entry(*def, name + ":latest", running));
    if (versions.size() > 1)
      for (const auto& m : versions)
        models.push_back(tag_entry(*m, fmt::format("{}:{}", name, m->version), running));
    for (const auto& [label, v] : state.registry.labels(name))
      if (auto m = state.registry.resolve({name, v, {}}))
        models.push_back(tag_entry(*m, name + ":" + label, running));
  }
  // LoRA adapters, as name:latest over their base's default version (details.parent_model).
  for (const LoraSpec& l : state.registry.loras().list()) {
    if (record.key && !record.key->allows(l.name)) continue;
    if (auto base = state.registry.resolve({l.base, {}, {}})) {
      ojson e = tag_entry(*base, l.name + ":latest", running);
      e["details"]["parent_model"] = l.base;
      models.push_back(std::move(e));
    }
  }
  log_request(record, 200);
  responder->send(200, dump_json(ojson{{"models", models}}));
}

void handle_ollama_show(ServingState& state, const HttpRequest& req,
                        std::shared_ptr<HttpResponder> responder, RequestRecord& record) {
  const json body = parse_json_body(req.body);
  check_known_fields(body, [](const std::string& k) {
    return k == "model" || k == "name" || k == "verbose" || k == "system" || k == "template" ||
           k == "options";
  });
  std::string name = string_field(body, "model");
  if (name.empty()) name = string_field(body, "name");  // the older field
  if (name.empty()) throw HttpError(400, "'model' is required", "", "model");
  (void)bool_field(body, "verbose", false);
  auto model = resolve_model(state, record, registry_field(state, name), "", req.header_lookup());
  record.model = model->name;
  record.version = model->version;
  const ModelConfig& cfg = model->config();
  const auto chat = model->chat_format();
  const std::string family = lower_family(*model);
  // Parameters as a Modelfile writes them: the stop sequences the model ends on.
  std::string parameters;
  if (const Tokenizer* tok = model->tok()) {
    for (int32_t id : model->eos_ids) {
      const std::string text = tok->id_to_piece(id);
      if (!text.empty()) parameters += fmt::format("stop {}\n", dump_json(json(text)));
    }
  }
  ojson info = {{"general.architecture", family},
                {"general.parameter_count", model->model->parameter_count()},
                {family + ".context_length", cfg.max_seq_len},
                {family + ".embedding_length", cfg.dim},
                {family + ".block_count", cfg.n_layers},
                {family + ".attention.head_count", cfg.n_heads},
                {family + ".attention.head_count_kv", cfg.n_kv_heads},
                {family + ".vocab_size", cfg.vocab_size}};
  std::string modelfile = fmt::format("# Served by tokenflow\nFROM {}\n", model->path);
  for (size_t at = 0, next; at < parameters.size(); at = next + 1) {
    next = parameters.find('\n', at);
    modelfile += "PARAMETER " + parameters.substr(at, next - at + 1);
  }
  // Ollama's capabilities from the model's tasks.
  ojson capabilities = ojson::array();
  const bool generates = model->tasks & static_cast<uint8_t>(ModelTask::kGenerate);
  if (generates) capabilities.push_back("completion");
  if (model->tasks & static_cast<uint8_t>(ModelTask::kEmbed)) capabilities.push_back("embedding");
  if (generates && chat->error().empty() && chat->source().find("tools") != std::string::npos)
    capabilities.push_back("tools");
  if (generates && chat->reasons()) capabilities.push_back("thinking");
  ojson out = {{"license", ""},
               {"modelfile", modelfile},
               {"parameters", parameters},
               {"template", chat->source()},
               {"details", ollama_details(*model)},
               {"model_info", info},
               {"capabilities", capabilities},
               {"modified_at", rfc3339(std::chrono::system_clock::from_time_t(model->created))}};
  log_request(record, 200);
  responder->send(200, dump_json(out));
}

}  // namespace tf
