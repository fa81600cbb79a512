// `tokenflow bench --url URL`: load against a running OpenAI-compatible server (tokenflow, vLLM,
// llama.cpp's server), as vLLM's serving benchmark does: a sweep of concurrency levels (closed
// loop) or request rates (Poisson arrivals), streaming completions, and per level the request
// throughput, output tokens/s and p50/p90/p99 of time to first token, inter-token latency and
// end-to-end latency, printed and written as JSON (scripts/plot-bench draws it). A grpc:// URL
// runs the same load through tokenflow's GenerationService/GenerateStream instead of SSE.

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "tokenflow/v1/generation.grpc.pb.h"

namespace tf::cli {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct Target {
  std::string host, port, path_prefix;
  bool grpc = false;  // grpc://host:port: tokenflow's gRPC GenerationService
};

Target parse_url(const std::string& url) {
  Target t;
  t.grpc = url.rfind("grpc://", 0) == 0;
  const std::string scheme = t.grpc ? "grpc://" : "http://";
  if (url.rfind(scheme, 0) != 0) fail("--url must start with http:// or grpc:// (got '{}')", url);
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    t.path_prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!t.path_prefix.empty() && t.path_prefix.back() == '/') t.path_prefix.pop_back();
  }
  const size_t colon = rest.rfind(':');
  t.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  t.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (t.host.empty()) fail("--url has no host: '{}'", url);
  return t;
}

struct Prompt {
  json prompt;  // a string or a list of token ids
  int max_tokens;
};

struct Result {
  explicit Result(Clock::time_point start = {}) : start(start) {}
  // A streamed event carrying tokens arrived now: the first is the time to first token, the
  // others inter-token gaps.
  void token_event() {
    const auto now = Clock::now();
    if (events == 0) {
      ttft = std::chrono::duration<double>(now - start).count();
    } else {
      itl.push_back(std::chrono::duration<double>(now - last).count());
    }
    last = now;
    ++events;
  }
  // The stream ended (error set if it failed): the outcome and the end-to-end time.
  void close() {
    if (output_tokens == 0) output_tokens = events;
    ok = error.empty() && events > 0;
    if (error.empty() && events == 0) error = "no tokens";
    e2e = std::chrono::duration<double>(Clock::now() - start).count();
  }

  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int64_t output_tokens = 0;
  Clock::time_point start, last{};
  int64_t events = 0;
};

// One client's connection: runs one streamed request at a time.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual Result complete(const std::string& model, const Prompt& p) = 0;
};

// One keep-alive HTTP connection; reconnects after an error.
class HttpConnection final : public Connection {
 public:
  explicit HttpConnection(const Target& t) : t_(t) {}

  Result complete(const std::string& model, const Prompt& p) override {
    Result r(Clock::now());
    try {
      if (!stream_) connect();
      json body = {{"prompt", p.prompt}, {"max_tokens", p.max_tokens},
                   {"stream", true},     {"ignore_eos", true},
                   {"temperature", 0},   {"stream_options", {{"include_usage", true}}}};
      if (!model.empty()) body["model"] = model;
      http::request<http::string_body> req{http::verb::post, t_.path_prefix + "/v1/completions",
                                           11};
      req.set(http::field::host, t_.host);
      req.set(http::field::content_type, "application/json");
      req.keep_alive(true);
      req.body() = body.dump();
      req.prepare_payload();
      http::write(*stream_, req);

      http::response_parser<http::buffer_body> parser;
      // No limit, but not boost::none: Boost 1.74 compares a Content-Length with an empty
      // optional as larger, so every response with a length (an error's JSON) failed as
      // "body limit exceeded" instead of reporting its status.
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      http::read_header(*stream_, buffer_, parser);
      if (parser.get().result_int() != 200) {
        r.error = fmt::format("HTTP {}", parser.get().result_int());
        drop();
        r.close();
        return r;
      }
      std::string pending;
      char chunk[16384];
      while (!parser.is_done()) {
        parser.get().body().data = chunk;
        parser.get().body().size = sizeof chunk;
        beast::error_code ec;
        http::read_some(*stream_, buffer_, parser, ec);  // what has arrived, not a full buffer
        if (ec && ec != http::error::need_buffer) throw beast::system_error(ec);
        pending.append(chunk, sizeof chunk - parser.get().body().size);
        size_t end;
        while ((end = pending.find("\n\n")) != std::string::npos) {
          const std::string event = pending.substr(0, end);
          pending.erase(0, end + 2);
          if (event.rfind("data: ", 0) != 0) continue;
          const std::string data = event.substr(6);
          if (data == "[DONE]") continue;
          const json j = json::parse(data, nullptr, false);
          if (j.is_discarded()) continue;
          if (j.contains("error")) {
            r.error = j["error"].value("message", "error in stream");
            continue;
          }
          if (j.contains("usage") && j["usage"].is_object())
            r.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
          if (!j.contains("choices") || j["choices"].empty()) continue;
          r.token_event();
        }
      }
      if (!parser.keep_alive()) drop();
    } catch (const std::exception& e) {
      r.error = e.what();
      drop();
    }
    r.close();
    return r;
  }

 private:
  void connect() {
    tcp::resolver resolver(io_);
    stream_ = std::make_unique<beast::tcp_stream>(io_);
    stream_->connect(resolver.resolve(t_.host, t_.port));
    stream_->socket().set_option(tcp::no_delay(true));
    stream_->expires_never();
  }
  void drop() {
    if (stream_) {
      beast::error_code ec;
      stream_->socket().shutdown(tcp::socket::shutdown_both, ec);
    }
    stream_.reset();
    buffer_.clear();
  }

  Target t_;
  boost::asio::io_context io_;
  std::unique_ptr<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
};

// One gRPC channel; each request is a GenerateStream call, each step message a token event.
class GrpcConnection final : public Connection {
 public:
  explicit GrpcConnection(const Target& t)
      : stub_(tokenflow::v1::GenerationService::NewStub(grpc::CreateCustomChannel(
            t.host + ":" + t.port, grpc::InsecureChannelCredentials(), unique_channel()))) {}

  Result complete(const std::string& model, const Prompt& p) override {
    namespace v1 = tokenflow::v1;
    Result r(Clock::now());
    v1::GenerateRequest req;
    req.set_model(model);
    if (p.prompt.is_string()) {
      req.set_text(p.prompt.get<std::string>());
    } else {
      for (const auto& id : p.prompt) req.mutable_token_ids()->add_ids(id.get<int32_t>());
    }
    req.mutable_sampling()->set_max_tokens(p.max_tokens);
    req.mutable_sampling()->set_temperature(0.0f);
    req.mutable_sampling()->set_ignore_eos(true);
    grpc::ClientContext ctx;
    auto reader = stub_->GenerateStream(&ctx, req);
    v1::GenerateStreamResponse msg;
    while (reader->Read(&msg)) {
      if (msg.has_end()) {
        r.output_tokens = msg.end().usage().completion_tokens();
        continue;
      }
      if (!msg.step().token_ids().empty()) r.token_event();
    }
    const grpc::Status status = reader->Finish();
    if (!status.ok())
      r.error =
          fmt::format("gRPC {}: {}", static_cast<int>(status.error_code()), status.error_message());
    r.close();
    return r;
  }

 private:
  // A channel of its own per client (gRPC would otherwise share one connection among all).
  static grpc::ChannelArguments unique_channel() {
    static std::atomic<int> n{0};
    grpc::ChannelArguments args;
    args.SetInt("tokenflow.bench.client", n++);
    return args;
  }
  std::unique_ptr<tokenflow::v1::GenerationService::Stub> stub_;
};

std::unique_ptr<Connection> connect_to(const Target& t) {
  if (t.grpc) return std::make_unique<GrpcConnection>(t);
  return std::make_unique<HttpConnection>(t);
}

std::vector<Prompt> make_prompts(const UrlBenchOptions& o) {
  std::vector<Prompt> out;
  if (!o.dataset.empty()) {
    std::ifstream in(o.dataset);
    if (!in) fail("cannot read --dataset {}", o.dataset);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("prompt"))
        fail("{}:{}: expected a JSON object with \"prompt\"", o.dataset, n);
      out.push_back({j["prompt"], j.value("max_tokens", o.output_len)});
    }
    if (out.empty()) fail("--dataset {} holds no prompt", o.dataset);
    return out;
  }
  // Random token ids (exact prompt lengths whatever the tokenizer), ids in [10, 500).
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> id(10, 499);
  const bool sharegpt = o.workload == "sharegpt";
  // The sharegpt workload's lengths: log-normal around the medians, prompts spread wider than
  // answers (sigma 1.0 and 0.7: a tenth of the prompts past 3.6x the median, answers past 2.5x),
  // clamped to [4, 8x] and [1, 4x] of the medians.
  std::lognormal_distribution<double> in_len(std::log(o.input_len), 1.0),
      out_len(std::log(o.output_len), 0.7);
  std::bernoulli_distribution with_system(o.system_share);
  json system = json::array();
  for (int t = 0; t < o.system_prompt_len; ++t) system.push_back(id(rng));
  for (int i = 0; i < o.num_prompts; ++i) {
    int n_in = o.input_len, n_out = o.output_len;
    const bool shared = o.system_prompt_len > 0 && with_system(rng);
    const int before = shared ? o.system_prompt_len : 0;
    if (sharegpt) {
      const int room = o.max_model_len - before;  // run_url_bench: >= 5 where there is a limit
      for (int draw = 0; draw < 64; ++draw) {     // within --max-model-len: drawn again
        n_in = static_cast<int>(std::clamp(std::lround(in_len(rng)), 4L, 8L * o.input_len));
        n_out = static_cast<int>(std::clamp(std::lround(out_len(rng)), 1L, 4L * o.output_len));
        if (o.max_model_len == 0 || n_in + n_out <= room) break;
      }
      if (o.max_model_len > 0 && n_in + n_out > room) {  // a limit near the shortest: cut
        n_in = std::min(n_in, std::max(4, room - n_out));
        n_out = std::min(n_out, room - n_in);
      }
    }
    json ids = shared ? system : json::array();
    for (int t = 0; t < n_in; ++t) ids.push_back(id(rng));
    out.push_back({ids, n_out});
  }
  return out;
}

struct Level {
  std::string kind;  // "concurrency" or "rate"
  double value;
};

void progress(int done, int total) {
  if (!isatty(fileno(stderr))) return;
  const int width = 30, filled = total ? done * width / total : width;
  std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(filled, '=').c_str(),
               std::string(width - filled, ' ').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\r%*s\r", width + 24, "");
  std::fflush(stderr);
}

json run_level(const UrlBenchOptions& o, const Target& t, const std::vector<Prompt>& prompts,
               const Level& level) {
  const int n = o.num_prompts;
  std::vector<Result> results(static_cast<size_t>(n));
  std::atomic<int> next{0}, done{0};
  std::mutex progress_mu;
  const auto start = Clock::now();
  auto finish_one = [&] {
    const int d = ++done;
    std::lock_guard lock(progress_mu);
    progress(d, n);
  };
  if (level.kind == "concurrency") {
    std::vector<std::thread> workers;
    for (int w = 0; w < static_cast<int>(level.value); ++w) {
      workers.emplace_back([&] {
        auto c = connect_to(t);
        for (int i; (i = next++) < n;) {
          results[static_cast<size_t>(i)] = c->complete(o.model, prompts[i % prompts.size()]);
          finish_one();
        }
      });
    }
    for (auto& w : workers) w.join();
  } else {
    // Poisson arrivals at `value` requests per second, each on its own connection.
    std::mt19937_64 rng(o.seed + 1);
    std::exponential_distribution<double> gap(level.value);
    std::vector<std::thread> requests;
    auto at = Clock::now();
    for (int i = 0; i < n; ++i) {
      std::this_thread::sleep_until(at);
      requests.emplace_back([&, i] {
        auto c = connect_to(t);
        results[static_cast<size_t>(i)] = c->complete(o.model, prompts[i % prompts.size()]);
        finish_one();
      });
      at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    }
    for (auto& r : requests) r.join();
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> ttft, itl, e2e;
  int64_t tokens = 0, prompt_ids = 0, max_tokens = 0;
  for (int i = 0; i < n; ++i) {
    const Prompt& p = prompts[static_cast<size_t>(i) % prompts.size()];
    if (p.prompt.is_array()) prompt_ids += static_cast<int64_t>(p.prompt.size());
    max_tokens += p.max_tokens;
  }
  int ok = 0;
  std::map<std::string, int> errors;
  for (const auto& r : results) {
    if (!r.ok) {
      ++errors[r.error];
      continue;
    }
    ++ok;
    ttft.push_back(r.ttft);
    e2e.push_back(r.e2e);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    tokens += r.output_tokens;
  }
  auto stats = [](const std::vector<double>& v) {
    return json{{"p50", percentile(v, 50) * 1000},
                {"p90", percentile(v, 90) * 1000},
                {"p99", percentile(v, 99) * 1000}};
  };
  return {{level.kind, level.value},
          {"requests", n},
          {"completed", ok},
          {"errors", errors},
          {"duration_s", wall},
          {"request_throughput", ok / wall},
          {"output_tokens", tokens},
          {"output_throughput", static_cast<double>(tokens) / wall},
          {"ttft_ms", stats(ttft)},
          {"itl_ms", stats(itl)},
          {"e2e_ms", stats(e2e)},
          {"mean_prompt_ids", static_cast<double>(prompt_ids) / n},
          {"mean_max_tokens", static_cast<double>(max_tokens) / n}};
}

std::vector<double> parse_list(const std::string& text, const char* what) {
  std::vector<double> out;
  size_t i = 0;
  while (i <= text.size()) {
    const size_t comma = std::min(text.find(',', i), text.size());
    const std::string item = text.substr(i, comma - i);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v > 0))
      fail("{} must be a comma-separated list of positive numbers, got '{}'", what, text);
    out.push_back(v);
    i = comma + 1;
  }
  return out;
}

}  // namespace

int run_url_bench(const UrlBenchOptions& o) {
  if (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1)
    fail("--num-prompts, --input-len and --output-len must be >= 1");
  if (o.workload != "fixed" && o.workload != "sharegpt")
    fail("--workload is fixed or sharegpt, got '{}'", o.workload);
  if (!(o.system_share >= 0 && o.system_share <= 1) || o.system_prompt_len < 0)
    fail("--system-share is between 0 and 1 and --system-prompt-len >= 0");
  if (!(o.slo_ttft_ms >= 0) || !(o.slo_itl_ms >= 0))
    fail("--slo-ttft-ms and --slo-itl-ms are >= 0 (0: no objective)");
  if (o.max_model_len < 0) fail("--max-model-len is >= 0 (0: no limit)");
  if (o.max_model_len > 0 && o.dataset.empty()) {
    // A fixed prompt must fit as asked; a sharegpt draw is redrawn, so its shortest must fit.
    const int64_t shortest =
        o.system_prompt_len +
        (o.workload == "sharegpt" ? int64_t{5} : int64_t{o.input_len} + o.output_len);
    if (shortest > o.max_model_len)
      fail(
          "--max-model-len {} is shorter than the {} workload's {} tokens (system prompt, "
          "prompt and output)",
          o.max_model_len, o.workload, shortest);
  }
  const Target t = parse_url(o.url);
  std::vector<Level> levels;
  if (!o.request_rates.empty()) {
    for (double r : parse_list(o.request_rates, "--request-rate")) levels.push_back({"rate", r});
  } else {
    for (double c : parse_list(o.concurrencies, "--concurrency")) {
      if (c != static_cast<int>(c) || c > 1024) fail("--concurrency levels are integers <= 1024");
      levels.push_back({"concurrency", c});
    }
  }
  const std::vector<Prompt> prompts = make_prompts(o);
  json all = json::array();
  int failed = 0;
  json slo_broken_at = nullptr;
  std::printf("%-12s %8s %9s %10s %12s %22s %22s %22s\n", levels[0].kind.c_str(), "ok", "req/s",
              "out tok/s", "errors", "ttft ms p50/p90/p99", "itl ms p50/p90/p99",
              "e2e ms p50/p90/p99");
  for (const Level& level : levels) {
    const json r = run_level(o, t, prompts, level);
    int errors = 0;
    for (const auto& [k, v] : r["errors"].items()) errors += v.get<int>();
    auto three = [&](const char* key) {
      return fmt::format("{:.0f}/{:.0f}/{:.0f}", r[key]["p50"].get<double>(),
                         r[key]["p90"].get<double>(), r[key]["p99"].get<double>());
    };
    std::printf("%-12g %8d %9.2f %10.1f %12d %22s %22s %22s\n", level.value,
                r["completed"].get<int>(), r["request_throughput"].get<double>(),
                r["output_throughput"].get<double>(), errors, three("ttft_ms").c_str(),
                three("itl_ms").c_str(), three("e2e_ms").c_str());
    std::fflush(stdout);
    failed += errors;
    if (errors > 0) {
      for (const auto& [k, v] : r["errors"].items())
        std::fprintf(stderr, "  %d x %s\n", v.get<int>(), k.c_str());
    }
    all.push_back(r);
    // The objective: p99s within it and every request answered.
    const double ttft99 = r["ttft_ms"]["p99"].get<double>(),
                 itl99 = r["itl_ms"]["p99"].get<double>();
    const bool past = errors > 0 || (o.slo_ttft_ms > 0 && ttft99 > o.slo_ttft_ms) ||
                      (o.slo_itl_ms > 0 && itl99 > o.slo_itl_ms);
    if ((o.slo_ttft_ms > 0 || o.slo_itl_ms > 0) && past) {
      slo_broken_at = level.value;
      std::printf("SLO broken at %s %g (ttft p99 %.0f ms, itl p99 %.0f ms, %d errors)\n",
                  level.kind.c_str(), level.value, ttft99, itl99, errors);
      break;
    }
  }
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out);
    if (!out) fail("cannot write {}", o.json_out);
    out << json{{"url", o.url},
                {"model", o.model},
                {"input_len", o.input_len},
                {"output_len", o.output_len},
                {"num_prompts", o.num_prompts},
                {"dataset", o.dataset},
                {"workload", o.workload},
                {"system_prompt_len", o.system_prompt_len},
                {"system_share", o.system_share},
                {"max_model_len", o.max_model_len},
                {"slo",
                 {{"ttft_p99_ms", o.slo_ttft_ms},
                  {"itl_p99_ms", o.slo_itl_ms},
                  {"broken_at", slo_broken_at}}},
                {"levels", all}}
               .dump(2)
        << "\n";
  }
  if (failed > 0) std::fprintf(stderr, "%d requests failed\n", failed);
  return failed > 0 ? 1 : 0;
}

}  // namespace tf::cli
