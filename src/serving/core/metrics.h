#pragma once
// Prometheus metrics in the text exposition format (0.0.4): counters, gauges and histograms with
// labels, thread-safe, rendered on GET /metrics. The server records per-request series here (by
// model and version); engine gauges and process figures are read at scrape time (metrics.cc).
// This is the one piece of global-ish mutable state DESIGN.md allows: one registry per server.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tf {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Appends one sample line: name{k="v",...} value (label values escaped).
void append_sample(std::string& out, const std::string& name, const Labels& labels, double value);
// Appends "# HELP" and "# TYPE" lines.
void append_header(std::string& out, const std::string& name, const std::string& help,
                   const char* type);

class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help);
  void add(const Labels& labels, double v = 1.0);
  double value(const Labels& labels) const;
  void render(std::string& out) const;

 private:
  std::string name_, help_;
  mutable std::mutex mu_;
  std::map<Labels, double> series_;
};

class HistogramFamily {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<double> bounds);
  void observe(const Labels& labels, double v);
  void render(std::string& out) const;
  uint64_t count(const Labels& labels) const;

 private:
  struct Series {
    std::vector<uint64_t> buckets;  // per bound, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  std::string name_, help_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<Labels, Series> series_;
};

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_start_time_seconds (Prometheus' standard process metrics, Linux).
void append_process_metrics(std::string& out);

// Latency buckets from 1 ms to 10 minutes: a P99 resolves from milliseconds to minutes.
std::vector<double> latency_buckets();

// TF Serving's request_latency buckets: 33 exponential bounds from 10 us, each 1.8x the last.
std::vector<double> tf_serving_latency_buckets();

// The per-request series of one server.
struct ServerMetrics {
  CounterFamily requests{"tokenflow_requests_total",
                         "Requests answered (REST and gRPC), by model, version, HTTP status code "
                         "(gRPC calls: the equivalent code), outcome (success, client_error, "
                         "server_error, client_gone) and task (generate, embed, score, classify, "
                         "other); with API keys on, by key (its name)"};
  CounterFamily key_tokens{"tokenflow_key_tokens_total",
                           "Tokens of answered requests per API key (its name), model and type "
                           "(prompt, generation); only with API keys on"};
  HistogramFamily request_duration{"tokenflow_request_duration_seconds",
                                   "End-to-end request latency, from the request's arrival to "
                                   "its last byte",
                                   latency_buckets()};
  HistogramFamily ttft{"tokenflow_time_to_first_token_seconds",
                       "Time from a sequence's arrival to its first generated token",
                       latency_buckets()};
  HistogramFamily itl{"tokenflow_inter_token_latency_seconds",
                      "Time between consecutive tokens of a sequence, as the server sends them",
                      latency_buckets()};
  HistogramFamily queue_time{"tokenflow_request_queue_time_seconds",
                             "Time a sequence waited before its first step", latency_buckets()};
  CounterFamily prompt_tokens{"tokenflow_prompt_tokens_total",
                              "Prompt tokens of finished requests"};
  CounterFamily generation_tokens{"tokenflow_generation_tokens_total",
                                  "Tokens generated for finished requests"};
  // gRPC calls, with the names and labels of go-grpc-prometheus (grpc_service, grpc_method,
  // grpc_type, and grpc_code for handled calls).
  CounterFamily grpc_started{"grpc_server_started_total", "gRPC calls started on the server"};
  CounterFamily grpc_handled{"grpc_server_handled_total",
                             "gRPC calls completed on the server, by status code"};
  // TF Serving's own series, under the names its Prometheus exporter gives them, for requests of
  // its APIs (REST and gRPC Predict, GetModelMetadata, GetModelStatus): dashboards written for
  // tensorflow_model_server keep working. Latency in microseconds, TF Serving's buckets.
  CounterFamily tf_request_count{":tensorflow:serving:request_count",
                                 "The total number of requests (TF Serving's, by model_name and "
                                 "status)"};
  HistogramFamily tf_request_latency{":tensorflow:serving:request_latency",
                                     "Distribution of wall time (in microseconds) for TF Serving "
                                     "requests (by model_name, API and entrypoint)",
                                     tf_serving_latency_buckets()};
};

}  // namespace tf
