// tokenflow generate: one prompt, one sequence, tokens streamed to stdout as they are sampled.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf::cli {
namespace {

struct GenerateOptions {
  std::string model = "models/stories260K/stories260K.bin";
  std::string tokenizer;
  std::string prompt;
  std::string prompt_ids;
  int max_tokens = 256;
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
  std::optional<uint64_t> seed;
  int threads = 0;
  bool no_echo = false;
  bool ignore_eos = false;
  bool verbose = false;
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < INT32_MIN || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      fail("--prompt-ids: '{}' is not a token id", item);
    }
  }
  return ids;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_generate(const GenerateOptions& o) {
  SamplingParams params;
  params.temperature = o.temperature;
  params.top_k = o.top_k;
  params.top_p = o.top_p;
  params.seed = o.seed;
  params.validate();
  if (o.max_tokens < 0) fail("--max-tokens must be >= 0, got {}", o.max_tokens);
  if (!o.prompt.empty() && !o.prompt_ids.empty()) fail("give --prompt or --prompt-ids, not both");

  const auto t_load = std::chrono::steady_clock::now();
  std::unique_ptr<Model> model = load_model(o.model);
  const ModelConfig& cfg = model->config();
  LoadedTokenizer loaded = load_tokenizer(o.model, cfg.vocab_size, o.tokenizer);
  const Tokenizer* tokenizer = loaded.tokenizer.get();
  const double load_s = seconds_since(t_load);

  std::vector<int32_t> prompt;
  if (!o.prompt_ids.empty()) {
    prompt = parse_ids(o.prompt_ids);
  } else {
    if (!tokenizer) {
      fail("no tokenizer found for '{}': pass --tokenizer FILE, or token ids with --prompt-ids",
           o.model);
    }
    prompt = tokenizer->encode(o.prompt, /*add_special_tokens=*/true);
  }
  if (prompt.empty()) fail("the prompt is empty and the model has no BOS token to start from");
  const int64_t ctx = cfg.max_seq_len;
  if (static_cast<int64_t>(prompt.size()) > ctx) {
    fail("the prompt has {} tokens but the model's context is {} tokens", prompt.size(), ctx);
  }
  const int64_t max_new =
      std::min<int64_t>(o.max_tokens, ctx - static_cast<int64_t>(prompt.size()));

  ThreadPool pool(o.threads);
  const int64_t total = static_cast<int64_t>(prompt.size()) + max_new;
  const int64_t n_blocks = (total + KvCache::kDefaultBlockSize - 1) / KvCache::kDefaultBlockSize;
  KvCache kv(cfg, std::max<int64_t>(n_blocks, 1));
  std::vector<int32_t> table(static_cast<size_t>(kv.num_blocks()));
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));
  Sampler sampler(params);

  // Stop on any EOS id the model declares; llama2.c checkpoints also end a story with BOS, as
  // its run.c does.
  std::vector<int32_t> stop_ids = loaded.stop_ids;
  if (cfg.eos_id >= 0) stop_ids.push_back(cfg.eos_id);
  if (cfg.format == "llama2c" && cfg.bos_id >= 0) stop_ids.push_back(cfg.bos_id);
  auto is_stop = [&](int32_t id) {
    return !o.ignore_eos && std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
  };

  auto write = [](const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  std::optional<IncrementalDetokenizer> detok;
  if (tokenizer) detok.emplace(*tokenizer, prompt);
  if (!o.no_echo) {
    if (tokenizer) {
      write(tokenizer->decode(prompt));
    } else {
      for (int32_t id : prompt) write(std::to_string(id) + " ");
    }
  }
  auto emit = [&](int32_t id) { write(detok ? detok->push(id) : std::to_string(id) + " "); };

  const auto t_start = std::chrono::steady_clock::now();
  double ttft = 0.0;
  int64_t generated = 0;
  int64_t pos = 0;
  std::vector<int32_t> input = prompt;
  while (generated < max_new) {
    SequenceChunk chunk{input, pos, table, false};
    model->forward(std::span<const SequenceChunk>(&chunk, 1), kv, logits.data(), pool);
    pos += static_cast<int64_t>(input.size());
    const int32_t next = sampler.sample(logits.data(), cfg.vocab_size);
    if (generated == 0) ttft = seconds_since(t_start);
    ++generated;
    if (is_stop(next)) break;
    emit(next);
    input.assign(1, next);
  }
  if (detok) write(detok->flush());
  std::printf("\n");
  std::fflush(stdout);
  if (o.verbose) {
    const double total_s = seconds_since(t_start);
    const double decode_s = total_s - ttft;
    std::fprintf(
        stderr,
        "model: %s (%s, %s)\nload: %.3f s\nprompt tokens: %zu\ngenerated tokens: %lld\n"
        "time to first token: %.2f ms\nprefill: %.1f tok/s\ndecode: %.1f tok/s\n"
        "threads: %d\n",
        o.model.c_str(), cfg.architecture.c_str(), cfg.format.c_str(), load_s, prompt.size(),
        static_cast<long long>(generated), ttft * 1e3,
        ttft > 0 ? static_cast<double>(prompt.size()) / ttft : 0.0,
        generated > 1 && decode_s > 0 ? static_cast<double>(generated - 1) / decode_s : 0.0,
        pool.size());
  }
  return 0;
}

}  // namespace

Action add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  app.add_option("--model,-m", o->model, "llama2.c .bin file or Hugging Face model directory")
      ->capture_default_str();
  app.add_option("--tokenizer", o->tokenizer, "tokenizer file (default: found beside the model)");
  app.add_option("--prompt,-p", o->prompt, "prompt text");
  app.add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids");
  app.add_option("--max-tokens,-n", o->max_tokens, "tokens to generate at most")
      ->capture_default_str();
  app.add_option("--temperature,-t", o->temperature, "0 for greedy decoding")
      ->capture_default_str();
  app.add_option("--top-k", o->top_k, "sample among the k most likely tokens (0: off)")
      ->capture_default_str();
  app.add_option("--top-p", o->top_p, "nucleus sampling mass (1: off)")->capture_default_str();
  app.add_option("--seed", o->seed, "random seed (default: random)");
  app.add_option("--threads", o->threads, "compute threads (default: one per core)");
  app.add_flag("--no-echo", o->no_echo, "do not print the prompt before the generated text");
  app.add_flag("--ignore-eos", o->ignore_eos, "keep generating past the end-of-sequence token");
  app.add_flag("--verbose,-v", o->verbose, "print timings to stderr");
  return [o] { return run_generate(*o); };
}

}  // namespace tf::cli
