// tokenflow generate: one prompt through the engine; tokens streamed to stdout as they are
// sampled (or, for several sequences and beam search, each result printed when it is complete).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/memory_budget.h"
#include "engine/model_instance.h"
#include "model/model.h"
#include "sampling/sequence_sampler.h"
#include "serving/core/prompt.h"
#include "serving/openai/batch_file.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf::cli {
namespace {

struct GenerateOptions {
  std::string model = "models/stories260K/stories260K.bin";
  std::string tokenizer;
  std::string prompt;
  std::string prompt_ids;
  bool chat = false;
  std::string system;
  std::string chat_template_kwargs;
  SamplingParams params;
  std::optional<uint64_t> seed;
  std::vector<std::string> logit_bias;
  std::vector<std::string> ban;
  std::string stop_token_ids;
  int threads = 0;
  std::string dtype = "f32";
  std::string input_file, output_file;
  int concurrency = 64;
  std::string kv_cache_memory = "512MiB";
  bool disable_hybrid_kv_cache = false;
  std::string kv_cache_dtype = "f32";
  bool no_echo = false;
  bool verbose = false;
  // Speculative decoding (docs/speculative.md).
  std::string speculative = "off";
  int32_t num_speculative_tokens = 4;
  std::string draft_dtype;
  int64_t spec_max_running = 8;
  double spec_min_acceptance = 0.3;
};

void set_speculation(EngineConfig& ec, const GenerateOptions& o) {
  cli::set_speculation(ec, o.speculative, o.num_speculative_tokens, o.draft_dtype,
                       kernels::parse_weight_type(o.dtype), o.spec_max_running,
                       o.spec_min_acceptance);
}

void print_speculation(const EngineStats& st) {
  if (st.spec_drafts == 0) return;
  std::fprintf(stderr,
               "speculation: %lld verification steps, %lld tokens proposed, %lld accepted "
               "(%.1f %%), %.2f tokens per step\n",
               static_cast<long long>(st.spec_drafts), static_cast<long long>(st.spec_draft_tokens),
               static_cast<long long>(st.spec_accepted_tokens),
               100.0 * static_cast<double>(st.spec_accepted_tokens) /
                   static_cast<double>(std::max<int64_t>(st.spec_draft_tokens, 1)),
               static_cast<double>(st.spec_emitted_tokens) / static_cast<double>(st.spec_drafts));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void write(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void print_logprobs(const Tokenizer* tok, const std::vector<SampleResult>& steps) {
  for (const auto& s : steps) {
    auto piece = [&](int32_t id) { return tok ? tok->id_to_piece(id) : std::to_string(id); };
    std::fprintf(stderr, "%6d %-16s %9.4f", s.token, piece(s.token).c_str(), s.logprob);
    for (const auto& alt : s.top)
      std::fprintf(stderr, "  %s:%.4f", piece(alt.token).c_str(), alt.logprob);
    std::fprintf(stderr, "\n");
  }
}

int run_generate(GenerateOptions& o) {
  SamplingParams& params = o.params;
  for (const auto& kv : o.logit_bias) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) fail("--logit-bias takes ID=BIAS, got '{}'", kv);
    const auto id = parse_id_list(kv.substr(0, eq), "--logit-bias");
    if (id.size() != 1) fail("--logit-bias takes ID=BIAS, got '{}'", kv);
    try {
      params.logit_bias.emplace_back(id[0], std::stof(kv.substr(eq + 1)));
    } catch (const std::exception&) {
      fail("--logit-bias: '{}' is not a number", kv.substr(eq + 1));
    }
  }
  for (const auto& b : o.ban) params.bad_words_ids.push_back(parse_id_list(b, "--ban"));
  if (!o.stop_token_ids.empty())
    params.stop_token_ids = parse_id_list(o.stop_token_ids, "--stop-token-ids");
  if (!o.prompt.empty() && !o.prompt_ids.empty()) fail("give --prompt or --prompt-ids, not both");
  if (!o.input_file.empty() || !o.output_file.empty()) {
    if (o.input_file.empty() || o.output_file.empty())
      fail("--input-file and --output-file go together");
    ModelInstance m;
    m.load(o.model, o.tokenizer, kernels::parse_weight_type(o.dtype));
    EngineConfig ec;
    ec.threads = o.threads;
    ec.kv_cache_bytes = parse_memory_budget(o.kv_cache_memory);
    ec.kv_type = kernels::parse_kv_type(o.kv_cache_dtype.c_str());
    ec.hybrid_kv_cache = !o.disable_hybrid_kv_cache;
    set_speculation(ec, o);
    m.start_engine(ec);
    BatchOptions bo;
    bo.input_file = o.input_file;
    bo.output_file = o.output_file;
    bo.concurrency = o.concurrency;
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = run_batch_file(*m.engine, m.tokenizer, m.config(), bo);
    if (o.verbose) {
      m.engine->wait_until_idle();  // the last step's figures recorded
      const EngineStats st = m.engine->stats();
      const double s = seconds_since(t0);
      std::fprintf(stderr, "batch: %lld generated tokens in %.3f s: %.1f tok/s\n",
                   static_cast<long long>(st.generated_tokens), s,
                   static_cast<double>(st.generated_tokens) / s);
      print_speculation(st);
      std::fprintf(
          stderr,
          "engine: %lld preemptions, %lld of %lld prompt tokens from the prefix cache, %lld "
          "blocks released behind the sliding window, at most %lld sequences running; %lld KV "
          "blocks of %lld bytes in %s\n",
          static_cast<long long>(st.preemptions), static_cast<long long>(st.prefix_hit_tokens),
          static_cast<long long>(st.prefix_queried_tokens),
          static_cast<long long>(st.kv_window_releases), static_cast<long long>(st.running_peak),
          static_cast<long long>(st.kv_blocks_total),
          static_cast<long long>(KvCache::bytes_per_block(m.config(), m.engine->kv_layout(),
                                                          KvCache::kDefaultBlockSize, ec.kv_type)),
          m.engine->kv_layout().describe().c_str());
    }
    return rc;
  }

  const auto t_load = std::chrono::steady_clock::now();
  ModelInstance instance;
  instance.load(o.model, o.tokenizer, kernels::parse_weight_type(o.dtype));
  const ModelConfig& cfg = instance.config();
  const LoadedTokenizer& loaded = instance.tokenizer;
  const Tokenizer* tokenizer = instance.tok();
  const double load_s = seconds_since(t_load);
  params.validate(cfg.vocab_size);
  kernels::parse_kv_type(o.kv_cache_dtype.c_str());  // a bad name fails before any output
  if (!params.stop.empty() && !tokenizer) fail("--stop needs a tokenizer to see text");

  std::vector<int32_t> prompt;
  if (!o.prompt_ids.empty()) {
    prompt = parse_id_list(o.prompt_ids, "--prompt-ids");
  } else {
    if (!tokenizer) {
      fail("no tokenizer found for '{}': pass --tokenizer FILE, or token ids with --prompt-ids",
           o.model);
    }
    if (o.chat) {
      // The prompt as a user message (after an optional system message), through the model's
      // chat template, as /v1/chat/completions does.
      std::vector<ChatMessage> messages;
      if (!o.system.empty()) messages.push_back({"system", o.system});
      messages.push_back({"user", o.prompt});
      nlohmann::json kwargs = nlohmann::json::object();
      if (!o.chat_template_kwargs.empty()) {
        kwargs = nlohmann::json::parse(o.chat_template_kwargs, nullptr, /*allow_exceptions=*/false);
        if (!kwargs.is_object())
          fail(
              "--chat-template-kwargs must be a JSON object, e.g. '{{\"enable_thinking\": "
              "false}}'");
      }
      prompt = render_chat_prompt(*ChatFormat::for_model(loaded, cfg), messages,
                                  /*add_generation_prompt=*/true, loaded, cfg.max_seq_len, kwargs);
    } else {
      prompt = tokenizer->encode(o.prompt, /*add_special_tokens=*/true);
    }
  }
  if (prompt.empty()) fail("the prompt is empty and the model has no BOS token to start from");
  for (int32_t id : prompt) {
    if (id < 0 || id >= cfg.vocab_size)
      fail("prompt token id {} is outside the vocabulary (0..{})", id, cfg.vocab_size - 1);
  }
  const int64_t ctx = cfg.max_seq_len;
  if (static_cast<int64_t>(prompt.size()) >= ctx + (cfg.encoder_decoder() ? 1 : 0)) {
    fail("the prompt has {} tokens but the model's context is {} tokens", prompt.size(), ctx);
  }
  // An encoder-decoder's output has the decoder's context, less its start token.
  fit_max_tokens(params, cfg.encoder_decoder() ? 1 : prompt.size(), ctx,
                 /*max_tokens_given=*/false);

  const uint64_t seed = o.seed ? *o.seed : random_seed();
  params.seed = seed;
  if (!o.no_echo && (params.candidates() == 1 && !params.beam_search())) {
    write(tokenizer ? tokenizer->decode(prompt) : "");
  }

  // Through the engine: n (or best_of) sequences decode together, sharing the prompt's blocks.
  // Beam search returns num_return_sequences; its beams may each need their own blocks.
  const int32_t m = params.beam_search() ? params.num_return_sequences : params.candidates();
  const int32_t slots = params.beam_search() ? params.num_beams : m;
  EngineConfig ec;
  ec.threads = o.threads;
  ec.kv_type = kernels::parse_kv_type(o.kv_cache_dtype.c_str());
  ec.hybrid_kv_cache = !o.disable_hybrid_kv_cache;
  // Every cache group holds at most per_seq blocks of each sequence.
  const CacheLayout layout = CacheLayout::for_model(cfg, ec.hybrid_kv_cache);
  const int bs = KvCache::block_size_for(cfg, layout, KvCache::kDefaultBlockSize, ec.kv_type);
  const int64_t per_seq = (static_cast<int64_t>(prompt.size()) + params.max_tokens + bs - 1) / bs;
  ec.kv_cache_bytes = (per_seq + 1) * slots * layout.num_groups() *
                      KvCache::bytes_per_block(cfg, layout, bs, ec.kv_type);
  set_speculation(ec, o);
  instance.start_engine(ec);  // loads a draft model, if any: not counted as generation time
  const auto t_start = std::chrono::steady_clock::now();
  Engine& engine = *instance.engine;
  GenerationRequest req;
  req.prompt = prompt;
  req.params = params;
  auto stream = engine.submit(req);
  std::vector<CompletedSequence> seqs(m);
  const bool live_output = m == 1 && !params.beam_search();
  RequestOutput ev;
  while (stream->next(ev)) {
    append_output(seqs.at(ev.index), ev);
    if (live_output) {
      if (tokenizer) {
        write(ev.text);
      } else {
        for (int32_t t : ev.token_ids) write(std::to_string(t) + " ");
      }
    }
  }
  const RequestTimings timings = stream->timings();
  int64_t generated = 0;
  for (const auto& s : seqs) generated += static_cast<int64_t>(s.tokens.size());
  if (live_output) {
    write("\n");
    if (params.logprobs) print_logprobs(tokenizer, seqs[0].logprobs);
  } else {
    // best_of: keep the n candidates with the highest cumulative logprob.
    std::vector<int32_t> order(m);
    std::iota(order.begin(), order.end(), 0);
    if (!params.beam_search() && m > params.n) {
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return seqs[a].cumulative_logprob > seqs[b].cumulative_logprob;
      });
      order.resize(params.n);
    }
    for (int32_t s : order) {
      std::printf("--- sequence %d (%s, %zu tokens, cumulative logprob %.4f) ---\n", s,
                  finish_reason_name(seqs[s].finish), seqs[s].tokens.size(),
                  seqs[s].cumulative_logprob);
      if (tokenizer) {
        write((o.no_echo ? "" : tokenizer->decode(prompt)) + seqs[s].text + "\n");
      } else {
        for (int32_t t : seqs[s].tokens) std::printf("%d ", t);
        std::printf("\n");
      }
      if (params.logprobs) print_logprobs(tokenizer, seqs[s].logprobs);
    }
  }
  const double ttft = std::chrono::duration<double>(timings.first_token - timings.arrival).count();
  if (o.verbose) {
    const double total_s = seconds_since(t_start);
    const double decode_s = total_s - ttft;
    std::fprintf(
        stderr,
        "model: %s (%s, %s)\nload: %.3f s\nprompt tokens: %zu\ngenerated tokens: %lld\n"
        "time to first token: %.2f ms\nprefill: %.1f tok/s\ndecode: %.1f tok/s\nfinish: %s\n"
        "seed: %llu\nthreads: %d\n",
        o.model.c_str(), cfg.architecture.c_str(), cfg.format.c_str(), load_s, prompt.size(),
        static_cast<long long>(generated), ttft * 1e3,
        ttft > 0 ? static_cast<double>(prompt.size()) / ttft : 0.0,
        generated > m && decode_s > 0 ? static_cast<double>(generated - m) / decode_s : 0.0,
        finish_reason_name(seqs[0].finish), static_cast<unsigned long long>(seed),
        o.threads > 0 ? o.threads : ThreadPool::hardware_threads());
    engine.wait_until_idle();
    print_speculation(engine.stats());
  }
  return 0;
}

}  // namespace

Action add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  SamplingParams& p = o->params;
  p.max_tokens = 256;
  app.add_option("--model,-m", o->model, "llama2.c .bin file or Hugging Face model directory")
      ->capture_default_str();
  app.add_option("--tokenizer", o->tokenizer, "tokenizer file (default: found beside the model)");
  app.add_option("--prompt,-p", o->prompt, "prompt text");
  app.add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids");
  app.add_flag("--chat", o->chat,
               "send the prompt as a user message through the model's chat template");
  app.add_option("--system", o->system, "with --chat: a system message first");
  app.add_option("--chat-template-kwargs", o->chat_template_kwargs,
                 "with --chat: a JSON object of more template variables, e.g. "
                 "'{\"enable_thinking\": false}' (Qwen3)");
  app.add_option("--max-tokens,-n", p.max_tokens, "tokens to generate at most")
      ->capture_default_str();
  app.add_option("--min-tokens", p.min_tokens, "no EOS or stop token before this many")
      ->capture_default_str();
  app.add_option("--temperature,-t", p.temperature, "0 for greedy decoding")->capture_default_str();
  app.add_option("--top-k", p.top_k, "keep the k most likely tokens (0: off)")
      ->capture_default_str();
  app.add_option("--top-p", p.top_p, "nucleus sampling mass (1: off)")->capture_default_str();
  app.add_option("--min-p", p.min_p, "drop tokens below min_p x the top probability (0: off)")
      ->capture_default_str();
  app.add_option("--typical-p", p.typical_p, "locally typical sampling mass (1: off)")
      ->capture_default_str();
  app.add_option("--repetition-penalty", p.repetition_penalty,
                 "> 1 discourages repeats (HF semantics)")
      ->capture_default_str();
  app.add_option("--presence-penalty", p.presence_penalty, "[-2, 2], OpenAI semantics")
      ->capture_default_str();
  app.add_option("--frequency-penalty", p.frequency_penalty, "[-2, 2], OpenAI semantics")
      ->capture_default_str();
  app.add_option("--logit-bias", o->logit_bias, "ID=BIAS added to a token's logit (repeatable)");
  app.add_option("--no-repeat-ngram", p.no_repeat_ngram_size,
                 "never repeat an n-gram of this size (0: off)");
  app.add_option("--ban", o->ban, "token ids (a,b,c: a sequence) never to generate (repeatable)");
  app.add_option("--stop", p.stop, "stop string, not included in the output (repeatable)");
  app.add_option("--stop-token-ids", o->stop_token_ids,
                 "comma-separated ids that end the sequence");
  app.add_flag("--ignore-eos", p.ignore_eos, "keep generating past the end-of-sequence token");
  app.add_option("--seed", o->seed,
                 "random seed: the same seed gives the same text (default: random)");
  app.add_option("--n", p.n, "sequences to return")->capture_default_str();
  app.add_option("--best-of", p.best_of, "sample this many, return the n most likely");
  app.add_option("--logprobs", p.logprobs,
                 "print each token's logprob and this many alternatives (stderr)");
  app.add_option("--num-beams", p.num_beams, "beam search with this many beams (1: off)")
      ->capture_default_str();
  app.add_option("--length-penalty", p.length_penalty, "beam score = sum logprob / length^this")
      ->capture_default_str();
  app.add_flag("--early-stopping", p.early_stopping,
               "stop beam search once num_beams hypotheses are finished");
  app.add_option("--num-return-sequences", p.num_return_sequences, "beams to print")
      ->capture_default_str();
  app.add_option("--threads", o->threads, "compute threads (default: one per core)");
  app.add_option(
         "--dtype", o->dtype,
         "weights in memory: f32, bf16, f16, int8 or q4 (a GGUF keeps its own types under f32)")
      ->capture_default_str();
  app.add_option("--input-file", o->input_file,
                 "batch job: one OpenAI-style request per line (jsonl)");
  app.add_option("--output-file", o->output_file,
                 "batch job: results, one line per input line, in order");
  app.add_option("--concurrency", o->concurrency, "batch job: requests in flight")
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", o->kv_cache_dtype, "keys and values: f32, bf16, f16 or q8_0")
      ->capture_default_str();
  app.add_option("--kv-cache-memory", o->kv_cache_memory,
                 "KV cache budget: bytes, 512MiB, 2GiB, or a fraction of free memory (0.3)")
      ->capture_default_str()
      ->capture_default_str();
  app.add_flag("--disable-hybrid-kv-cache-manager", o->disable_hybrid_kv_cache,
               "one KV cache group for every layer: sliding-window layers beside global ones "
               "keep every block (as vLLM's flag)");
  app.add_flag("--no-echo", o->no_echo, "do not print the prompt before the generated text");
  app.add_flag("--verbose,-v", o->verbose, "print timings to stderr");
  app.add_option("--speculative", o->speculative,
                 "speculative decoding: off, ngram (prompt lookup) or draft:PATH (a draft model "
                 "with the same vocabulary); docs/speculative.md")
      ->capture_default_str();
  app.add_option("--num-speculative-tokens", o->num_speculative_tokens,
                 "the most tokens proposed per step")
      ->capture_default_str();
  app.add_option("--draft-dtype", o->draft_dtype, "the draft model's weights (default: --dtype)");
  app.add_option("--spec-max-running", o->spec_max_running,
                 "batch job: speculate only while at most this many sequences run")
      ->capture_default_str();
  app.add_option("--spec-min-acceptance", o->spec_min_acceptance,
                 "a sequence whose proposals' acceptance rate falls below this pauses 16 steps")
      ->capture_default_str();
  return [o] { return run_generate(*o); };
}

}  // namespace tf::cli
