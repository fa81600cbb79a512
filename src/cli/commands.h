#pragma once
// The tokenflow subcommands. Each registers its options on the CLI11 app and returns the action
// to run when it is chosen.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tf::cli {

using Action = std::function<int()>;

// Token ids given on the command line: "1,2,3" (or, with allow_json, "[1, 2, 3]"). `what`
// names the option in errors.
std::vector<int32_t> parse_id_list(const std::string& text, const char* what,
                                   bool allow_json = false);

Action add_generate(CLI::App& app);
Action add_inspect(CLI::App& app);
Action add_tokenize(CLI::App& app);
Action add_embed(CLI::App& app);
Action add_bench(CLI::App& app);
Action add_serve(CLI::App& app);
// TF Serving's `tensorflow_model_server` command line onto serve (serve.cc).
Action add_tf_model_server(CLI::App& app);
Action add_quantize(CLI::App& app);
Action add_convert(CLI::App& app);
// `quantize IN.gguf OUT.gguf --dtype T` (convert.cc): every tensor re-quantized, metadata kept.
int requantize_gguf(const std::string& in, const std::string& out, const std::string& dtype);
// `bench --roofline`: this machine's limits and the matmul's fraction of them (roofline.cc).
int run_roofline_bench(int threads);

// The p-th percentile (0-100) of v with linear interpolation; 0 for an empty v (bench.cc).
double percentile(std::vector<double> v, double p);

// `bench --url`: a running server under a sweep of load (bench_url.cc).
struct UrlBenchOptions {
  std::string url;            // http://host:port
  std::string model;          // the "model" field ("" : the server's default)
  std::string concurrencies;  // "1,4,16,64": closed-loop levels
  std::string request_rates;  // "2,4,8": Poisson arrivals per second (instead of concurrency)
  std::string dataset;        // JSON lines {"prompt": ..., "max_tokens"?: N}; else random ids
  int num_prompts = 64;       // requests per level
  int input_len = 128, output_len = 128;
  // "fixed": every random prompt input_len ids, output_len out; "sharegpt": lengths drawn
  // log-normally around those medians (a chat log's heavy tail: a few prompts 10x the median).
  std::string workload = "fixed";
  int system_prompt_len = 0;  // one shared system prompt of this many ids ...
  double system_share = 0;    // ... at the start of this share of the prompts
  // > 0: the server's context (prompt + output tokens); sharegpt draws past it are drawn again,
  // as vLLM's benchmark drops ShareGPT conversations longer than the model takes.
  int max_model_len = 0;
  // Service-level objective (p99s, ms; 0: none): a sweep stops after the first level past it.
  double slo_ttft_ms = 0, slo_itl_ms = 0;
  uint64_t seed = 0;
  std::string json_out;
};
int run_url_bench(const UrlBenchOptions& options);

}  // namespace tf::cli
