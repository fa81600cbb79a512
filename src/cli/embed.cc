// tokenflow embed: texts (or text pairs) through an encoder model (BERT, RoBERTa, XLM-R): one
// JSON line per input with its embedding (pooled as the model's sentence-transformers config
// says, or --pooling), a classifier's scores and labels, or with --hidden every token's state.
// Inputs are batched (--batch) the way a server would batch them; the timing goes to stderr.

#include <nlohmann/json.hpp>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "model/bert.h"
#include "model/model.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf::cli {
namespace {

using nlohmann::json;

struct EmbedOptions {
  std::string model;
  std::string tokenizer;
  std::vector<std::string> prompts;
  std::string pair;
  std::string input_file;
  std::string pooling;  // empty: the model's
  bool normalize = false;
  bool hidden = false;
  int batch = 32;
  int threads = 0;
  std::string dtype = "f32";
  int repeat = 1;
};

struct Input {
  std::vector<int32_t> ids, types;
};

int run_embed(const EmbedOptions& o) {
  const kernels::WeightType dtype = kernels::parse_weight_type(o.dtype);
  std::unique_ptr<Model> loaded = load_model(o.model, dtype);
  auto* model = dynamic_cast<EncoderModel*>(loaded.get());
  if (!model)
    fail(ErrorKind::kInvalidArgument,
         "'{}' ({}) is a generator, not an encoder: embed takes BERT-family models (generators' "
         "embeddings: serve's /v1/embeddings)",
         o.model, loaded->config().architecture);
  const ModelConfig& c = model->config();
  LoadedTokenizer tok;  // loaded for the first text (token ids need none)
  bool tok_loaded = false;
  // The model's pooling as its files say (read at load), unless --pooling names one.
  const std::string& own = c.embedding_pooling;
  const EncoderPooling pooling = !o.pooling.empty() ? parse_encoder_pooling(o.pooling)
                                 : own.empty()      ? EncoderPooling::kCls
                                                    : parse_encoder_pooling(own);
  const bool normalize = o.normalize || (o.pooling.empty() && c.embedding_normalize);

  // Inputs: the prompts, then the file's lines ("text", {"text": ..., "pair": ...}, {"ids":
  // [...], "types": [...]}).
  std::vector<Input> inputs;
  auto add_text = [&](const std::string& text, const std::string* pair) {
    if (!tok_loaded) {
      tok = load_tokenizer(o.model, c.vocab_size, o.tokenizer);
      tok_loaded = true;
    }
    if (!tok.tokenizer) fail("no tokenizer found for '{}': give --tokenizer, or ids", o.model);
    Input in;
    if (pair) {
      tok.tokenizer->encode_pair(text, *pair, in.ids, in.types);
    } else {
      in.ids = tok.tokenizer->encode(text, true);
    }
    inputs.push_back(std::move(in));
  };
  for (const std::string& p : o.prompts) add_text(p, o.pair.empty() ? nullptr : &o.pair);
  if (!o.input_file.empty()) {
    std::ifstream f(o.input_file);
    if (!f) fail(ErrorKind::kNotFound, "cannot read '{}'", o.input_file);
    std::string line;
    int64_t n = 0;
    while (std::getline(f, line)) {
      ++n;
      if (line.empty()) continue;
      const json j = parse_json(line, fmt::format("'{}' line {}", o.input_file, n));
      if (j.is_string()) {
        add_text(j.get<std::string>(), nullptr);
      } else if (j.is_object() && j.contains("ids") && j["ids"].is_array()) {
        Input in;
        // Token ids, and optionally their token type ids ("types", as long as "ids").
        auto ints = [&](const json& list, const char* field, std::vector<int32_t>& out) {
          if (!list.is_array()) fail("'{}' line {}: {} must be a list", o.input_file, n, field);
          for (const auto& v : list) {
            if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN ||
                v.get<int64_t>() > INT32_MAX)
              fail("'{}' line {}: {} must be 32-bit integers", o.input_file, n, field);
            out.push_back(v.get<int32_t>());
          }
        };
        ints(j["ids"], "ids", in.ids);
        if (j.contains("types")) ints(j["types"], "types", in.types);
        inputs.push_back(std::move(in));
      } else if (j.is_object() && j.contains("text") && j["text"].is_string()) {
        const std::string pair = j.value("pair", "");
        add_text(j["text"].get<std::string>(), j.contains("pair") ? &pair : nullptr);
      } else {
        fail(
            "'{}' line {}: expected \"text\", {{\"text\": ..., \"pair\": ...}} or {{\"ids\": "
            "[...]}}",
            o.input_file, n);
      }
    }
  }
  if (inputs.empty())
    fail(ErrorKind::kInvalidArgument, "nothing to embed: give texts or --input-file");
  if (o.batch < 1) fail(ErrorKind::kInvalidArgument, "--batch must be at least 1");

  ThreadPool pool(o.threads);
  const int64_t dim = c.dim;
  std::vector<float> hidden, scores, pooled(static_cast<size_t>(dim));
  std::vector<json> results(inputs.size());
  int64_t tokens = 0;
  for (const Input& in : inputs) tokens += static_cast<int64_t>(in.ids.size());
  double seconds = 0.0;
  for (int rep = 0; rep < o.repeat; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t b = 0; b < inputs.size(); b += static_cast<size_t>(o.batch)) {
      const size_t e = std::min(inputs.size(), b + static_cast<size_t>(o.batch));
      std::vector<EncoderInput> batch;
      int64_t rows = 0;
      for (size_t i = b; i < e; ++i) {
        batch.push_back({inputs[i].ids, inputs[i].types});
        rows += static_cast<int64_t>(inputs[i].ids.size());
      }
      hidden.resize(static_cast<size_t>(rows * dim));
      model->encode(batch, hidden.data(), pool);
      const bool classifier =
          c.classifier != ModelConfig::Classifier::kNone && !o.hidden && o.pooling.empty();
      if (classifier) {
        scores.resize(batch.size() * static_cast<size_t>(c.num_labels));
        model->classify(batch, hidden.data(), scores.data(), pool);
      }
      if (rep + 1 < o.repeat) continue;
      int64_t row = 0;
      for (size_t i = b; i < e; ++i) {
        const int64_t len = static_cast<int64_t>(inputs[i].ids.size());
        const float* h = hidden.data() + row * dim;
        json r = {{"index", i}, {"tokens", len}};
        if (o.hidden) {
          json rows_json = json::array();
          for (int64_t t = 0; t < len; ++t)
            rows_json.push_back(std::vector<float>(h + t * dim, h + (t + 1) * dim));
          r["hidden"] = std::move(rows_json);
        } else if (classifier) {
          const float* s = scores.data() + (i - b) * c.num_labels;
          r["scores"] = std::vector<float>(s, s + c.num_labels);
          r["labels"] = c.labels;
        } else {
          pool_hidden(h, len, dim, pooling, pooled.data());
          if (normalize) {
            double n2 = 0.0;
            for (float v : pooled) n2 += static_cast<double>(v) * v;
            const float inv = n2 > 0 ? static_cast<float>(1.0 / std::sqrt(n2)) : 0.0f;
            for (float& v : pooled) v *= inv;
          }
          r["embedding"] = pooled;
        }
        results[i] = std::move(r);
        row += len;
      }
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (const json& r : results) std::printf("%s\n", r.dump().c_str());
  std::fprintf(stderr,
               "embedded %zu inputs (%lld tokens) in %.3f s: %.1f inputs/s, %.0f tokens/s "
               "(batch %d, %s pooling%s)\n",
               inputs.size(), static_cast<long long>(tokens), seconds,
               static_cast<double>(inputs.size()) / seconds, static_cast<double>(tokens) / seconds,
               o.batch, encoder_pooling_name(pooling), normalize ? ", normalized" : "");
  return 0;
}

}  // namespace

Action add_embed(CLI::App& app) {
  auto o = std::make_shared<EmbedOptions>();
  app.add_option("--model,-m", o->model, "encoder model directory (BERT, RoBERTa, XLM-R)")
      ->required();
  app.add_option("--tokenizer", o->tokenizer, "tokenizer file (default: found with the model)");
  app.add_option("--prompt,-p", o->prompts, "a text to embed (repeatable)");
  app.add_option("--pair", o->pair,
                 "a second text joined to each prompt (a cross-encoder's document)");
  app.add_option(
      "--input-file", o->input_file,
      "one input per line: \"text\", {\"text\": ..., \"pair\": ...} or {\"ids\": [...]}");
  app.add_option("--pooling", o->pooling,
                 "cls, mean, max or last (default: the model's sentence-transformers config, else "
                 "cls); given, a classifier's hidden states are pooled instead of scored");
  app.add_flag("--normalize", o->normalize, "scale embeddings to unit length");
  app.add_flag("--hidden", o->hidden, "print every token's final hidden state instead");
  app.add_option("--batch", o->batch, "inputs per forward pass (default 32)");
  app.add_option("--threads,-t", o->threads, "compute threads (default: one per core)");
  app.add_option("--dtype", o->dtype, "weights: f32, bf16, f16, int8, q4 (default f32)");
  app.add_option("--repeat", o->repeat, "run the inputs this many times (timing: the last run)");
  return [o] { return run_embed(*o); };
}

}  // namespace tf::cli
