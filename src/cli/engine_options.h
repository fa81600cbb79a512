#pragma once
// The engine's command-line options, shared by `serve` and `bench`: the KV budget, batch limits,
// TF Serving's batching knobs, the prefix cache and compute threads.

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/memory_budget.h"

namespace tf::cli {

// The speculation flags that `serve`, `bench` and `generate` share (docs/speculative.md); the
// draft's weights default to the model's dtype.
inline void set_speculation(EngineConfig& ec, const std::string& method, int32_t num_tokens,
                            const std::string& draft_dtype, kernels::WeightType dtype,
                            int64_t max_running, double min_acceptance) {
  set_speculative(ec, method);
  ec.ngram.num_tokens = num_tokens;
  ec.draft_weight_type = draft_dtype.empty() ? dtype : kernels::parse_weight_type(draft_dtype);
  ec.spec_max_running = max_running;
  if (!(min_acceptance >= 0.0 && min_acceptance <= 1.0))
    fail("--spec-min-acceptance must be in [0, 1], got {}", min_acceptance);
  ec.spec_min_acceptance = min_acceptance;
}

struct EngineOptions {
  std::string kv_cache_memory = "512MiB";
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  int64_t batch_timeout_micros = 0;
  bool no_prefix_caching = false;
  bool disable_hybrid_kv_cache = false;
  int threads = 0;
  std::string kv_cache_dtype = "f32";
  std::string speculative = "off";
  int32_t num_speculative_tokens = 4;
  int32_t prompt_lookup_min = 1, prompt_lookup_max = 4;
  int64_t spec_max_running = 8;
  std::string draft_dtype;  // empty: the model's --dtype
  double spec_min_acceptance = 0.3;
  int64_t grammar_token_budget_ms = 5000, grammar_request_budget_ms = 60000;
  std::string kv_cache_dir;
  std::string kv_cache_dir_size = "10GiB";

  // dtype: the model's weight type (a draft model's unless --draft-dtype).
  EngineConfig config(kernels::WeightType dtype = kernels::WeightType::kF32) const {
    EngineConfig ec;
    ec.threads = threads;
    ec.kv_cache_bytes = parse_memory_budget(kv_cache_memory);
    ec.prefix_caching = !no_prefix_caching;
    ec.hybrid_kv_cache = !disable_hybrid_kv_cache;
    ec.scheduler.max_num_seqs = max_num_seqs;
    ec.scheduler.max_num_batched_tokens = max_num_batched_tokens;
    ec.batch_timeout_micros = batch_timeout_micros;
    ec.kv_type = kernels::parse_kv_type(kv_cache_dtype.c_str());
    set_speculation(ec, speculative, num_speculative_tokens, draft_dtype, dtype, spec_max_running,
                    spec_min_acceptance);
    ec.ngram.min_n = prompt_lookup_min;
    ec.ngram.max_n = prompt_lookup_max;
    if (grammar_token_budget_ms < 0 || grammar_request_budget_ms < 0)
      fail("--grammar-token-budget-ms and --grammar-request-budget-ms must be >= 0 (0: no limit)");
    ec.grammar_budget = {std::chrono::milliseconds(grammar_token_budget_ms),
                         std::chrono::milliseconds(grammar_request_budget_ms)};
    ec.kv_disk.dir = kv_cache_dir;
    ec.kv_disk.max_bytes = parse_disk_size(kv_cache_dir_size);
    return ec;
  }
};

inline void add_engine_options(CLI::App& app, EngineOptions& o) {
  app.add_option("--kv-cache-memory", o.kv_cache_memory,
                 "KV cache budget (per model): bytes, 512MiB, 2GiB, or a fraction of free memory "
                 "(0.3)")
      ->capture_default_str();
  app.add_option("--max-num-seqs,--max-batch-size", o.max_num_seqs,
                 "sequences per step (TF Serving's max_batch_size)")
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "tokens per step")
      ->capture_default_str();
  app.add_option(
         "--batch-timeout-micros", o.batch_timeout_micros,
         "an idle engine waits this long to gather a batch (TF Serving's batch_timeout_micros)")
      ->capture_default_str();
  app.add_flag("--no-prefix-caching", o.no_prefix_caching, "turn the prefix cache off");
  app.add_flag("--disable-hybrid-kv-cache-manager", o.disable_hybrid_kv_cache,
               "keep every KV block of sliding-window layers that sit beside global ones (one "
               "cache group for all layers, as vLLM's flag), instead of releasing the blocks "
               "behind the window");
  app.add_option("--kv-cache-dtype", o.kv_cache_dtype,
                 "keys and values in the cache: f32, bf16 / f16 (half the memory per token) or "
                 "q8_0 (int8 with an f16 scale per token and head: about a quarter)")
      ->capture_default_str();
  app.add_option("--kv-cache-dir", o.kv_cache_dir,
                 "a directory for the prefix cache's second tier: full KV blocks are written there "
                 "as they are computed and read back by later requests with the same prefix, "
                 "after a restart too; replicas may share it (docs/kv-cache.md)");
  app.add_option("--kv-cache-dir-size", o.kv_cache_dir_size,
                 "the most --kv-cache-dir holds (least recently used blocks go first)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads (default: one per core)");
  app.add_option("--speculative", o.speculative,
                 "speculative decoding: off, ngram (prompt lookup: a recurring suffix proposes "
                 "what followed it) or draft:PATH (a model with the same vocabulary proposes; "
                 "it may be the model itself at a lower --draft-dtype); outputs keep their "
                 "distribution, and greedy ones are unchanged")
      ->capture_default_str();
  app.add_option("--draft-dtype", o.draft_dtype,
                 "the draft model's weights: f32, bf16, f16, int8 or q4 (default: --dtype)");
  app.add_option("--spec-min-acceptance", o.spec_min_acceptance,
                 "a sequence whose proposals' running acceptance rate falls below this stops "
                 "proposing for 16 steps")
      ->capture_default_str();
  app.add_option("--num-speculative-tokens", o.num_speculative_tokens,
                 "the most tokens proposed per step")
      ->capture_default_str();
  app.add_option("--prompt-lookup-min", o.prompt_lookup_min,
                 "the shortest suffix a prompt lookup matches")
      ->capture_default_str();
  app.add_option("--prompt-lookup-max", o.prompt_lookup_max,
                 "the longest suffix a prompt lookup tries")
      ->capture_default_str();
  app.add_option("--grammar-token-budget-ms", o.grammar_token_budget_ms,
                 "the CPU time a request's grammar (structured output) may take to compute one "
                 "token's mask; past it the request ends alone with an error (0: no limit)")
      ->capture_default_str();
  app.add_option("--grammar-request-budget-ms", o.grammar_request_budget_ms,
                 "the CPU time a request's grammar may take over all its tokens (0: no limit)")
      ->capture_default_str();
  app.add_option("--spec-max-running", o.spec_max_running,
                 "speculate only while at most this many sequences run (a busy batch has no "
                 "compute to spare)")
      ->capture_default_str();
}

}  // namespace tf::cli
