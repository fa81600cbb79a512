// tokenflow bench --offline: many requests through one engine, as vLLM's benchmark does, and the
// latency percentiles and throughput that come out.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/memory_budget.h"
#include "engine/model_instance.h"
#include "model/model.h"

namespace tf::cli {
namespace {

struct BenchOptions {
  bool offline = false;
  bool roofline = false;
  std::string model = "models/stories260K/stories260K.bin";
  int num_prompts = 64;
  int concurrency = 16;
  int input_len = 128;
  int output_len = 128;
  std::string output_range;  // "16:256": output lengths drawn uniformly from this range
  int prefix_len = 0;        // a shared prefix of this many tokens on every prompt
  std::string batching = "continuous";
  EngineOptions engine;
  std::string dtype = "f32";
  uint64_t seed = 0;
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  // --url
  std::string url, served_model, concurrency_list, request_rate, dataset, json_out;
  std::string workload = "fixed";
  int system_prompt_len = 0, max_model_len = 0;
  double system_share = 0, slo_ttft_ms = 0, slo_itl_ms = 0;
};

struct Sample {
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int64_t tokens = 0;
};

long peak_rss_mib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long kb = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb / 1024;
}

int run_bench(const BenchOptions& o) {
  if (o.roofline) return run_roofline_bench(o.engine.threads);
  if (!o.url.empty()) {
    UrlBenchOptions u;
    u.url = o.url;
    u.model = o.served_model;
    u.concurrencies =
        o.concurrency_list.empty() ? std::to_string(o.concurrency) : o.concurrency_list;
    u.request_rates = o.request_rate;
    u.dataset = o.dataset;
    u.num_prompts = o.num_prompts;
    u.input_len = o.input_len;
    u.output_len = o.output_len;
    u.seed = o.seed;
    u.json_out = o.json_out;
    u.workload = o.workload;
    u.system_prompt_len = o.system_prompt_len;
    u.system_share = o.system_share;
    u.max_model_len = o.max_model_len;
    u.slo_ttft_ms = o.slo_ttft_ms;
    u.slo_itl_ms = o.slo_itl_ms;
    return run_url_bench(u);
  }
  if (!o.offline) {
    fail("give --offline (an in-process engine), --url URL (a running server) or --roofline");
  }
  if (o.num_prompts < 1 || o.concurrency < 1 || o.input_len < 1 || o.output_len < 1 ||
      o.prefix_len < 0) {
    fail("--num-prompts, --concurrency, --input-len and --output-len must be >= 1");
  }
  if (o.batching != "continuous" && o.batching != "static" && o.batching != "static-ragged")
    fail("--batching is continuous, static or static-ragged, got '{}'", o.batching);
  int out_lo = o.output_len, out_hi = o.output_len;
  if (!o.output_range.empty()) {
    if (std::sscanf(o.output_range.c_str(), "%d:%d", &out_lo, &out_hi) != 2 || out_lo < 1 ||
        out_hi < out_lo) {
      fail("--output-range takes MIN:MAX, got '{}'", o.output_range);
    }
  }
  ModelInstance instance;
  instance.load(o.model, "", kernels::parse_weight_type(o.dtype));
  const ModelConfig& cfg = instance.config();
  if (o.prefix_len + o.input_len + out_hi > cfg.max_seq_len) {
    fail("prefix + input + output ({}) exceeds the model's context of {}",
         o.prefix_len + o.input_len + out_hi, cfg.max_seq_len);
  }
  const long rss_after_load = peak_rss_mib();
  EngineConfig ec = o.engine.config(kernels::parse_weight_type(o.dtype));
  ec.scheduler.static_batching = o.batching != "continuous";
  ec.scheduler.pad_finished = o.batching == "static";
  instance.start_engine(ec, /*ids_only=*/true);  // random ids: no text, no EOS
  Engine& engine = *instance.engine;

  std::mt19937_64 rng(o.seed);
  const int32_t lo_id = std::min<int32_t>(3, static_cast<int32_t>(cfg.vocab_size - 1));
  std::uniform_int_distribution<int32_t> tok(lo_id, static_cast<int32_t>(cfg.vocab_size - 1));
  std::vector<int32_t> prefix(static_cast<size_t>(o.prefix_len));
  for (auto& t : prefix) t = tok(rng);
  std::vector<GenerationRequest> reqs(static_cast<size_t>(o.num_prompts));
  std::uniform_int_distribution<int> out_len(out_lo, out_hi);
  for (auto& r : reqs) {
    r.prompt = prefix;
    for (int i = 0; i < o.input_len; ++i) r.prompt.push_back(tok(rng));
    r.params.temperature = o.temperature;
    r.params.top_p = o.top_p;
    r.params.seed = o.seed;
    r.params.ignore_eos = true;
    r.params.max_tokens = out_len(rng);
  }

  std::vector<Sample> samples(reqs.size());
  std::mutex errors_mu;
  std::string errors;
  std::atomic<int> failed{0};
  std::atomic<size_t> next{0};
  const auto t0 = Clock::now();
  auto client = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= reqs.size()) return;
      const auto start = Clock::now();
      std::shared_ptr<RequestStream> stream;
      try {
        stream = engine.submit(reqs[i]);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(errors_mu);
        if (errors.empty()) errors = e.what();
        ++failed;
        continue;
      }
      RequestOutput ev;
      auto last = start;
      bool first = true;
      while (stream->next(ev)) {
        if (ev.token_ids.empty()) continue;
        const auto now = Clock::now();
        if (first) {
          samples[i].ttft = std::chrono::duration<double>(now - start).count();
          first = false;
        } else {
          samples[i].itl.push_back(std::chrono::duration<double>(now - last).count());
        }
        last = now;
        samples[i].tokens += static_cast<int64_t>(ev.token_ids.size());
      }
      samples[i].e2e = std::chrono::duration<double>(Clock::now() - start).count();
    }
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < std::min(o.concurrency, o.num_prompts); ++c) clients.emplace_back(client);
  for (auto& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failed > 0)
    fail("{} of {} requests were rejected, e.g.: {}", failed.load(), o.num_prompts, errors);

  std::vector<double> ttft, itl, e2e;
  int64_t out_tokens = 0;
  for (const auto& s : samples) {
    ttft.push_back(s.ttft * 1e3);
    e2e.push_back(s.e2e * 1e3);
    for (double v : s.itl) itl.push_back(v * 1e3);
    out_tokens += s.tokens;
  }
  engine.wait_until_idle();  // the last step's figures recorded
  const EngineStats st = engine.stats();
  std::printf("model            %s (%s)\n", o.model.c_str(), cfg.architecture.c_str());
  std::printf(
      "batching         %s, %d prompts, concurrency %d, input %d (+%d shared prefix), output "
      "%d..%d\n",
      o.batching.c_str(), o.num_prompts, o.concurrency, o.input_len, o.prefix_len, out_lo, out_hi);
  std::printf("duration         %.2f s\n", wall);
  std::printf("requests/s       %.2f\n", static_cast<double>(o.num_prompts) / wall);
  std::printf("output tok/s     %.1f\n", static_cast<double>(out_tokens) / wall);
  std::printf("total tok/s      %.1f\n",
              static_cast<double>(out_tokens + static_cast<int64_t>(o.num_prompts) *
                                                   (o.input_len + o.prefix_len)) /
                  wall);
  std::printf("ttft ms          p50 %.1f  p90 %.1f  p99 %.1f\n", percentile(ttft, 50),
              percentile(ttft, 90), percentile(ttft, 99));
  std::printf("itl ms           p50 %.2f  p90 %.2f  p99 %.2f\n", percentile(itl, 50),
              percentile(itl, 90), percentile(itl, 99));
  std::printf("e2e ms           p50 %.1f  p90 %.1f  p99 %.1f\n", percentile(e2e, 50),
              percentile(e2e, 90), percentile(e2e, 99));
  std::printf("prefix cache     %lld of %lld prompt tokens hit\n",
              static_cast<long long>(st.prefix_hit_tokens),
              static_cast<long long>(st.prefix_queried_tokens));
  std::printf("preemptions      %lld\n", static_cast<long long>(st.preemptions));
  if (!ec.speculative_draft.empty() || ec.speculative_ngram) {
    std::printf("speculation      %lld verification steps, %lld proposed, %lld accepted\n",
                static_cast<long long>(st.spec_drafts),
                static_cast<long long>(st.spec_draft_tokens),
                static_cast<long long>(st.spec_accepted_tokens));
  }
  std::printf("kv cache         %lld blocks of %d tokens (%.0f MiB)\n",
              static_cast<long long>(st.kv_blocks_total), KvCache::kDefaultBlockSize,
              static_cast<double>(ec.kv_cache_bytes) / (1 << 20));
  // What one step reads: the packed weights (or the mapped f32 file), so that decode can be
  // judged against the machine's read bandwidth; prefill against its FLOP rate.
  const double weight_bytes =
      static_cast<double>(o.dtype == "f32" ? instance.model->weights().stored_bytes()
                                           : instance.model->weights().converted_bytes());
  const double params = static_cast<double>(instance.model->parameter_count());
  const bool as_stored = o.dtype == "f32" && instance.model->config().format == "gguf";
  std::printf("weights          %.0f MiB as %s; %.1f GB/s read over %lld steps\n",
              weight_bytes / (1 << 20), as_stored ? "stored" : o.dtype.c_str(),
              weight_bytes * static_cast<double>(st.steps) / wall / 1e9,
              static_cast<long long>(st.steps));
  std::printf("prefill GFLOP/s  %.1f (2 x params x prompt tokens / ttft p50)\n",
              2.0 * params * (o.input_len + o.prefix_len) / (percentile(ttft, 50) * 1e-3) / 1e9);
  std::printf("peak rss MiB     %ld (after load: %ld; weights %.0f MiB mapped)\n", peak_rss_mib(),
              rss_after_load,
              static_cast<double>(instance.model->weights().stored_bytes()) / (1 << 20));
  return 0;
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(idx);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

Action add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  app.add_flag("--offline", o->offline, "drive an in-process engine (no server)");
  app.add_flag("--roofline", o->roofline,
               "measure this machine's read bandwidth and FMA peak, and the matmul's share of "
               "them per weight dtype");
  app.add_option("--url", o->url,
                 "benchmark a running OpenAI-compatible server at this address "
                 "(http://127.0.0.1:8080), or tokenflow's gRPC API (grpc://127.0.0.1:8500)");
  app.add_option("--served-model", o->served_model,
                 "with --url: the \"model\" of the requests (default: the server's)");
  app.add_option("--sweep", o->concurrency_list,
                 "with --url: concurrency levels to run in turn, e.g. 1,4,16,64");
  app.add_option("--request-rate", o->request_rate,
                 "with --url: request rates (per second, Poisson arrivals) to run in turn, "
                 "instead of concurrency levels");
  app.add_option("--dataset", o->dataset,
                 "with --url: prompts as JSON lines {\"prompt\": ..., \"max_tokens\": N} "
                 "(default: random token ids of --input-len)");
  app.add_option("--json-out", o->json_out, "with --url: write the results as JSON here");
  app.add_option("--workload", o->workload,
                 "with --url: fixed (every prompt --input-len ids, --output-len out) or sharegpt "
                 "(lengths drawn log-normally around those medians, a chat log's heavy tail)")
      ->capture_default_str();
  app.add_option("--system-prompt-len", o->system_prompt_len,
                 "with --url: one shared system prompt of this many ids ...");
  app.add_option("--system-share", o->system_share,
                 "... at the start of this share (0-1) of the prompts");
  app.add_option("--max-model-len", o->max_model_len,
                 "with --url: the server's context in tokens; sharegpt lengths whose prompt and "
                 "output pass it are drawn again (0: no limit)");
  app.add_option("--slo-ttft-ms", o->slo_ttft_ms,
                 "with --url: TTFT p99 objective; a sweep stops after the first level past it");
  app.add_option("--slo-itl-ms", o->slo_itl_ms,
                 "with --url: inter-token latency p99 objective, likewise");
  app.add_option("--model,-m", o->model, "model to load")->capture_default_str();
  app.add_option("--num-prompts", o->num_prompts, "requests in all")->capture_default_str();
  app.add_option("--concurrency", o->concurrency, "requests in flight at once")
      ->capture_default_str();
  app.add_option("--input-len", o->input_len, "random prompt tokens per request")
      ->capture_default_str();
  app.add_option("--output-len", o->output_len, "tokens generated per request")
      ->capture_default_str();
  app.add_option("--output-range", o->output_range,
                 "MIN:MAX: mixed output lengths instead of --output-len");
  app.add_option("--prefix-len", o->prefix_len, "shared prefix tokens on every prompt")
      ->capture_default_str();
  app.add_option(
         "--batching", o->batching,
         "continuous; static (request-level as TF Serving: a batch runs until its longest member "
         "ends, finished rows computed as padding); static-ragged (finished rows leave the batch)")
      ->capture_default_str();
  add_engine_options(app, o->engine);
  app.add_option(
         "--dtype", o->dtype,
         "weights in memory: f32, bf16, f16, int8 or q4 (a GGUF keeps its own types under f32)")
      ->capture_default_str();
  app.add_option("--seed", o->seed, "seed of the random prompts (and of sampling)")
      ->capture_default_str();
  app.add_option("--temperature", o->temperature,
                 "with --offline: sampling temperature of every request (0: greedy)")
      ->check(CLI::Range(0.0f, 2.0f))
      ->capture_default_str();
  app.add_option("--top-p", o->top_p, "with --offline: nucleus sampling's top_p")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  return [o] { return run_bench(*o); };
}

}  // namespace tf::cli
