#include "serving/core/metrics.h"

#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/memory.h"

namespace tf {
namespace {

// Set when the program starts (static initialization), not at the first scrape.
const double kProcessStart =
    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string metric_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

}  // namespace

void append_sample(std::string& out, const std::string& name, const Labels& labels, double value) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out += ',';
      out += labels[i].first;
      out += "=\"";
      out += escape(labels[i].second);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += metric_number(value);
  out += '\n';
}

void append_header(std::string& out, const std::string& name, const std::string& help,
                   const char* type) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

CounterFamily::CounterFamily(std::string name, std::string help)
    : name_(std::move(name)), help_(std::move(help)) {}

void CounterFamily::add(const Labels& labels, double v) {
  std::lock_guard lock(mu_);
  series_[labels] += v;
}

double CounterFamily::value(const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0.0 : it->second;
}

void CounterFamily::render(std::string& out) const {
  append_header(out, name_, help_, "counter");
  std::lock_guard lock(mu_);
  for (const auto& [labels, v] : series_) append_sample(out, name_, labels, v);
}

HistogramFamily::HistogramFamily(std::string name, std::string help, std::vector<double> bounds)
    : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(bounds)) {}

void HistogramFamily::observe(const Labels& labels, double v) {
  std::lock_guard lock(mu_);
  Series& s = series_[labels];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size(), 0);
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (v <= bounds_[i]) {
      ++s.buckets[i];
      break;
    }
  }
  ++s.count;
  s.sum += v;
}

uint64_t HistogramFamily::count(const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.count;
}

void HistogramFamily::render(std::string& out) const {
  append_header(out, name_, help_, "histogram");
  std::lock_guard lock(mu_);
  for (const auto& [labels, s] : series_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += s.buckets[i];
      Labels l = labels;
      l.emplace_back("le", metric_number(bounds_[i]));
      append_sample(out, name_ + "_bucket", l, static_cast<double>(cumulative));
    }
    Labels inf = labels;
    inf.emplace_back("le", "+Inf");
    append_sample(out, name_ + "_bucket", inf, static_cast<double>(s.count));
    append_sample(out, name_ + "_sum", labels, s.sum);
    append_sample(out, name_ + "_count", labels, static_cast<double>(s.count));
  }
}

void append_process_metrics(std::string& out) {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  append_header(out, "process_cpu_seconds_total", "User and system CPU time spent in seconds",
                "counter");
  append_sample(out, "process_cpu_seconds_total", {}, cpu);
  long pages_total = 0, pages_resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_total = 0;
    std::fclose(f);
  }
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  append_header(out, "process_resident_memory_bytes", "Resident memory size in bytes", "gauge");
  append_sample(out, "process_resident_memory_bytes", {},
                static_cast<double>(pages_resident) * page);
  append_header(out, "process_virtual_memory_bytes", "Virtual memory size in bytes", "gauge");
  append_sample(out, "process_virtual_memory_bytes", {}, static_cast<double>(pages_total) * page);
  const MemoryStats mem = memory_stats();
  append_header(out, "tokenflow_heap_in_use_bytes",
                "Bytes allocated by malloc and not freed (mallinfo2 uordblks + hblkhd)", "gauge");
  append_sample(out, "tokenflow_heap_in_use_bytes", {}, static_cast<double>(mem.heap_in_use));
  append_header(out, "tokenflow_heap_free_bytes",
                "Bytes malloc holds free in its arenas (mallinfo2 fordblks)", "gauge");
  append_sample(out, "tokenflow_heap_free_bytes", {}, static_cast<double>(mem.heap_free));
  std::error_code ec;
  int64_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++fds;
  append_header(out, "process_open_fds", "Number of open file descriptors", "gauge");
  append_sample(out, "process_open_fds", {}, static_cast<double>(fds));
  append_header(out, "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds", "gauge");
  append_sample(out, "process_start_time_seconds", {}, kProcessStart);
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75, 1,
          1.5,   2,      3,     5,    7.5,   10,   15,    20,  30,   60,   120,  300, 600};
}

std::vector<double> tf_serving_latency_buckets() {
  std::vector<double> b;
  double v = 10;
  for (int i = 0; i < 33; ++i, v *= 1.8) b.push_back(v);
  return b;
}

}  // namespace tf
