#include "serving/openai/utility_api.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <cmath>
#include <cstring>
#include <unordered_set>

#include "chat/tool_calls.h"
#include "serving/core/embedding_plan.h"
#include "serving/core/job_summary.h"
#include "serving/core/planner.h"
#include "serving/core/prompt.h"
#include "serving/core/request_fields.h"
#include "serving/core/tool_fields.h"
#include "serving/openai/openai_api.h"
#include "serving/openai/openai_request.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// OpenAI's limit on the inputs of one embeddings request.
constexpr size_t kMaxEmbeddingInputs = 2048;

void check_body_fields(const json& body, const std::unordered_set<std::string>& allowed) {
  check_known_fields(body, [&](const std::string& key) { return allowed.count(key) > 0; });
}

std::shared_ptr<ServedModel> model_of(ServingState& state, const HttpRequest& req, const json& body,
                                      RequestRecord& record) {
  auto m = resolve_model(state, record, string_field(body, "model"), string_field(body, "user"),
                         req.header_lookup());
  record.model = m->name;
  record.version = m->version;
  return m;
}

const Tokenizer& tokenizer_of(const ServedModel& m) {
  if (!m.tok())
    throw HttpError(400, fmt::format("model '{}' has no tokenizer", m.name), "", "model");
  return *m.tok();
}

}  // namespace

void handle_tokenize(ServingState& state, const HttpRequest& req,
                     std::shared_ptr<HttpResponder> responder, RequestRecord& record) {
  const json body = parse_json_body(req.body);
  check_body_fields(
      body, {"model", "user", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
             "chat_template_kwargs", "tools", "return_token_strs"});
  if (present(body, "prompt") == present(body, "messages"))
    throw HttpError(400, "give either 'prompt' or 'messages'", "", "prompt");
  auto model = model_of(state, req, body, record);
  const Tokenizer& tok = tokenizer_of(*model);
  const bool chat = present(body, "messages");
  // vLLM's defaults: special tokens for a prompt, none for rendered messages (the template
  // writes them).
  const bool add_special = bool_field(body, "add_special_tokens", !chat);
  const bool add_generation_prompt = bool_field(body, "add_generation_prompt", true);
  const bool token_strs = bool_field(body, "return_token_strs", false);
  const std::vector<int32_t> ids = as_bad_request([&] {
    if (!chat) {
      if (!body["prompt"].is_string()) fail_field("prompt", "'prompt' must be a string");
      return tok.encode(body["prompt"].get<std::string>(), add_special);
    }
    nlohmann::json kwargs = nlohmann::json::object();
    if (present(body, "chat_template_kwargs")) {
      if (!body["chat_template_kwargs"].is_object())
        fail_field("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      kwargs = body["chat_template_kwargs"];
    }
    ojson tools;
    if (present(body, "tools")) tools = read_tool_request(body, ojson::parse(req.body)).tools;
    return render_chat_prompt(*model->chat_format(), read_chat_messages(body),
                              add_generation_prompt, model->tokenizer, model->config().max_seq_len,
                              kwargs, tools);
  });
  if (ids.size() > kMaxTokenIds)
    throw HttpError(400,
                    fmt::format("the input is {} tokens; /tokenize answers at most {}", ids.size(),
                                kMaxTokenIds),
                    "", chat ? "messages" : "prompt");
  ojson out = {{"count", ids.size()},
               {"max_model_len", model->config().max_seq_len},
               {"tokens", ids},
               {"token_strs", nullptr}};
  if (token_strs) {
    ojson strs = ojson::array();
    for (int32_t id : ids) {
      const int32_t one[] = {id};
      strs.push_back(tok.decode(one, false));
    }
    out["token_strs"] = strs;
  }
  record.prompt_tokens = static_cast<int64_t>(ids.size());
  log_request(record, 200);
  responder->send(200, dump_json(out));
}

void handle_detokenize(ServingState& state, const HttpRequest& req,
                       std::shared_ptr<HttpResponder> responder, RequestRecord& record) {
  const json body = parse_json_body(req.body);
  check_body_fields(body, {"model", "user", "tokens", "skip_special_tokens"});
  if (!present(body, "tokens") || !body["tokens"].is_array())
    throw HttpError(400, "'tokens' must be a list of token ids", "", "tokens");
  if (body["tokens"].size() > kMaxTokenIds)
    throw HttpError(400,
                    fmt::format("'tokens' holds {} ids; at most {} are taken",
                                body["tokens"].size(), kMaxTokenIds),
                    "", "tokens");
  auto model = model_of(state, req, body, record);
  const Tokenizer& tok = tokenizer_of(*model);
  std::vector<int32_t> ids;
  const int64_t vocab = model->config().vocab_size;
  for (const json& v : body["tokens"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
      throw HttpError(
          400,
          fmt::format("'tokens' must hold token ids from 0 to {}, got {}", vocab - 1, v.dump()), "",
          "tokens");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  const bool skip = bool_field(body, "skip_special_tokens", false);
  log_request(record, 200);
  responder->send(200, dump_json(ojson{{"prompt", tok.decode(ids, skip)}}));
}

EmbeddingsRequest read_embeddings_request(const json& body) {
  check_body_fields(body, {"model", "input", "encoding_format", "dimensions", "user", "pooling",
                           "normalize", "add_special_tokens", "truncate_prompt_tokens"});
  EmbeddingsRequest r;
  r.model = string_field(body, "model");
  r.user = string_field(body, "user");
  r.inputs = as_bad_request([&] { return read_completion_prompts(body, "input"); });
  if (r.inputs.size() > kMaxEmbeddingInputs)
    throw HttpError(400,
                    fmt::format("'input' holds {} inputs; at most {} are allowed", r.inputs.size(),
                                kMaxEmbeddingInputs),
                    "", "input");
  const std::string format = string_field(body, "encoding_format");
  if (!format.empty() && format != "float" && format != "base64")
    throw HttpError(400, "'encoding_format' must be \"float\" or \"base64\"", "",
                    "encoding_format");
  r.base64 = format == "base64";
  if (present(body, "dimensions")) {
    const json& d = body["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1)
      throw HttpError(400, "'dimensions' must be a positive integer", "", "dimensions");
    r.dimensions = d.get<int64_t>();
  }
  if (const std::string pooling = string_field(body, "pooling"); !pooling.empty()) {
    r.pooling = pooling_named(pooling);
    if (!r.pooling)
      throw HttpError(400, "'pooling' must be \"last\", \"mean\", \"cls\" or \"max\"", "",
                      "pooling");
  }
  r.normalize = bool_field(body, "normalize", true);
  r.add_special_tokens = bool_field(body, "add_special_tokens", true);
  r.truncate_prompt_tokens = truncate_prompt_tokens_of(body);
  return r;
}

std::string base64_floats(const std::vector<float>& v) {
  std::string bytes(v.size() * sizeof(float), '\0');
  for (size_t i = 0; i < v.size(); ++i) {  // little-endian, whatever the host
    uint32_t u;
    std::memcpy(&u, &v[i], sizeof u);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<char>((u >> (8 * b)) & 0xff);
  }
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

void handle_embeddings(ServingState& state, const HttpRequest& req,
                       std::shared_ptr<HttpResponder> responder,
                       std::shared_ptr<RequestRecord> record) {
  const json body = parse_json_body(req.body);
  const EmbeddingsRequest er = read_embeddings_request(body);
  auto served = model_of(state, req, body, *record);
  const ServedModel& model = *served;
  const std::optional<int64_t> dims = checked_dimensions(model, er.dimensions);
  EmbeddingInputs in;
  in.inputs = er.inputs;
  in.pooling = er.pooling;
  in.add_special_tokens = er.add_special_tokens;
  in.truncate_prompt_tokens = er.truncate_prompt_tokens;
  in.dimensions = er.dimensions;
  auto plan = plan_embeddings(state, served, in, *record, random_id("embd-"));
  responder->add_header("X-Model-Version", std::to_string(model.version));
  const std::string model_name = model.name;
  WholeBody answer = [er, dims, model_name](const GenerationJob& job, const JobSummary& summary) {
    ojson data = ojson::array();
    for (size_t i = 0; i < job.results().size(); ++i) {
      std::vector<float> e = job.results()[i].at(0).embedding;
      shape_embedding(e, dims, er.normalize);
      data.push_back({{"object", "embedding"},
                      {"index", i},
                      {"embedding", er.base64 ? ojson(base64_floats(e)) : ojson(e)}});
    }
    return dump_json(ojson{
        {"object", "list"},
        {"data", data},
        {"model", model_name},
        {"usage",
         {{"prompt_tokens", summary.prompt_tokens}, {"total_tokens", summary.prompt_tokens}}}});
  };
  run_job(state, plan, responder, record, whole_answer(responder, std::move(answer)));
}

}  // namespace tf
