// Micro-benchmarks of the f32 matmul per ISA table, at decode (GEMV) and prefill (GEMM) shapes;
// the dequantization of every GGUF block format (the reference code `tokenflow quantize` and
// embeddings use); and the block kernels' GEMV per format and table (4096 x 4096 weights, in
// L3 or memory); the matrix tile kernels (AMX) per weight type; the panel kernels per table;
// attention over a paged cache per table and KV type (a causal prefill in tasks of 4 queries, as
// transformer::attention groups them, and one query against a long context). Run:
// build/release/bench/bench_kernels --benchmark_repetitions=5
// --benchmark_report_aggregates_only [--benchmark_filter=dequant]

#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/ggml_quants.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/q8.h"

namespace {

using tf::kernels::IsaKernels;

void run_matmul(benchmark::State& state, const IsaKernels* isa) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(m * k), w(n * k), y(m * n);
  for (auto& v : x) v = dist(rng);
  for (auto& v : w) v = dist(rng);
  const tf::kernels::WeightMatrix wm{tf::kernels::WeightType::kF32, w.data(), nullptr, n, k};
  for (auto _ : state) {
    isa->matmul_cols(x.data(), m, k, wm, 0, n, nullptr, y.data(), n, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GB/s(w)"] = benchmark::Counter(
      4.0 * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// Activations [m, k] and weights [n, k] of a trained model's scale (normal, sigma 0.02).
struct Operands {
  std::vector<float> x, w;
  Operands(int64_t m, int64_t n, int64_t k) : x(m * k), w(n * k) {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (auto& v : x) v = dist(rng);
    for (auto& v : w) v = dist(rng);
  }
};

// The matrix tile kernels (AMX) for bf16 weights, one thread: the kernel alone,
// the activations laid out once outside the loop.
void run_tiles(benchmark::State& state, const IsaKernels* isa, tf::kernels::WeightType t) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const Operands o(m, n, k);
  const std::vector<float>&x = o.x, &w = o.w;
  std::vector<float> y(m * n);
  std::vector<uint8_t> data, scales;
  tf::kernels::quantize_rows(t, w.data(), n, k, data, scales);
  const tf::kernels::WeightMatrix wm{t, data.data(), scales.empty() ? nullptr : scales.data(), n,
                                     k};
  std::vector<uint8_t> xt(isa->tiles->packed_bytes(t, m, k));
  isa->tiles->pack_rows(t, x.data(), m, k, 0, m, xt.data());
  for (auto _ : state) {
    isa->tiles->matmul_cols(xt.data(), m, k, wm, 0, n, nullptr, y.data(), n, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GB/s(w)"] = benchmark::Counter(static_cast<double>(data.size() + scales.size()),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// The panel kernels (q4-panels from Q4_0, q8_0-panels, q4_k-, q6_k-panels) of a table, one thread:
// the kernel alone, the activations quantized once outside the loop.
void run_panels(benchmark::State& state, const IsaKernels* isa, tf::kernels::WeightType src) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const Operands o(m, n, k);
  const std::vector<float>&x = o.x, &w = o.w;
  std::vector<float> y(m * n);
  std::vector<uint8_t> blocks(tf::kernels::WeightMatrix::row_bytes(src, k) * n);
  tf::kernels::quantize_blocks(src, w.data(), n * k, blocks.data());
  const auto pt = tf::kernels::panel_type(src);
  std::vector<uint8_t> data(tf::kernels::WeightMatrix::row_bytes(pt, k) * n);
  std::vector<uint16_t> scales(n * k / 32);
  const auto wm =
      tf::kernels::pack_panels(src, blocks.data(), nullptr, n, k, data.data(), scales.data());
  tf::kernels::BlockQ8Buffer buf;
  // As matmul prepares them (the AMX tiles' layout from the tiles' token count).
  tf::kernels::prepare_block_activations(
      m, k, buf,
      isa->tiles != nullptr && isa->tiles->takes(pt, k) && m >= isa->tiles->panel_tokens);
  for (int64_t i = 0; i < m; ++i) tf::kernels::quantize_block_row(x.data(), i, buf);
  for (auto _ : state) {
    isa->matmul_cols_panels(buf.rows, wm, 0, n, nullptr, y.data(), n, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GB/s(w)"] = benchmark::Counter(static_cast<double>(wm.bytes()),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// n values of random blocks of type t (finite scales), quantized from random floats.
std::vector<uint8_t> random_blocks(tf::kernels::WeightType t, int64_t n) {
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  const tf::kernels::WeightType q =
      tf::kernels::can_quantize_blocks(t) ? t : tf::kernels::WeightType::kQ4_K;
  std::vector<uint8_t> b(
      static_cast<size_t>(n / tf::kernels::block_size(q) * tf::kernels::block_bytes(q)));
  tf::kernels::quantize_blocks(q, x.data(), n, b.data());
  if (q != t) {  // Q2_K, Q3_K, IQ4_XS: random bytes of the same size class
    b.resize(static_cast<size_t>(n / tf::kernels::block_size(t) * tf::kernels::block_bytes(t)));
    for (auto& v : b) v = static_cast<uint8_t>(rng());
    // f16 scale fields set to 0.001 (0x1419): finite, normal.
    const std::vector<size_t> fields =
        t == tf::kernels::WeightType::kQ2_K
            ? std::vector<size_t>{80, 82}
            : (t == tf::kernels::WeightType::kQ3_K ? std::vector<size_t>{108}
                                                   : std::vector<size_t>{0});
    const size_t bb = static_cast<size_t>(tf::kernels::block_bytes(t));
    for (size_t i = 0; i < b.size(); i += bb) {
      for (size_t f : fields) {
        b[i + f] = 0x19;
        b[i + f + 1] = 0x14;
      }
    }
  }
  return b;
}

void run_dequant(benchmark::State& state, tf::kernels::WeightType t) {
  const int64_t n = 1 << 22;
  const std::vector<uint8_t> b = random_blocks(t, n);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto _ : state) {
    tf::kernels::dequantize_blocks(t, b.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s(in)"] = benchmark::Counter(static_cast<double>(b.size()),
                                                  benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1000);
  state.counters["Gvalues/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

// What matmul runs for block weights on this table: the int8 block kernels with the activations
// quantized (the AVX2 tables; the quantization is timed too), or the f32-widening ones.
// widen: the table's f32-widening kernel even where it has the int8 one (same-run baseline).
void table_blocks(const IsaKernels* isa, const std::vector<float>& x, int64_t m, int64_t k,
                  const tf::kernels::WeightMatrix& wm, std::vector<float>& y, bool widen) {
  if (isa->matmul_cols_blocks_q8 != nullptr && !widen) {
    static tf::kernels::BlockQ8Buffer buf;
    tf::kernels::prepare_block_activations(m, k, buf);
    for (int64_t i = 0; i < m; ++i) tf::kernels::quantize_block_row(x.data(), i, buf);
    isa->matmul_cols_blocks_q8(buf.rows, wm, 0, wm.n, nullptr, y.data(), wm.n, false);
  } else {
    isa->matmul_cols_blocks(x.data(), m, k, wm, 0, wm.n, nullptr, y.data(), wm.n, false);
  }
}

void run_blocks_gemv(benchmark::State& state, const IsaKernels* isa, tf::kernels::WeightType t,
                     bool widen) {
  const int64_t n = 4096, k = 4096;
  const std::vector<uint8_t> b = random_blocks(t, n * k);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(k)), y(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  const tf::kernels::WeightMatrix wm{t, b.data(), nullptr, n, k};
  for (auto _ : state) {
    table_blocks(isa, x, 1, k, wm, y, widen);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s(w)"] = benchmark::Counter(static_cast<double>(b.size()),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// A prefill-sized product (m activation rows of k = 768 with n weight rows) of a block type, to
// set against matmul/.../m/n/768 of f32 weights.
void run_blocks_gemm(benchmark::State& state, const IsaKernels* isa, tf::kernels::WeightType t,
                     bool widen) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const std::vector<uint8_t> b = random_blocks(t, n * k);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  for (auto& v : x) v = dist(rng);
  const tf::kernels::WeightMatrix wm{t, b.data(), nullptr, n, k};
  for (auto _ : state) {
    table_blocks(isa, x, m, k, wm, y, widen);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void register_all() {
  for (tf::kernels::WeightType t : tf::kernels::kBlockTypes) {
    const std::string name(tf::kernels::weight_type_name(t));
    benchmark::RegisterBenchmark(("dequant/" + name).c_str(), run_dequant, t)
        ->Unit(benchmark::kMillisecond);
  }
  for (const IsaKernels* table : tf::kernels::supported_tables()) {
    for (bool widen : {false, true}) {
      if (widen && table->matmul_cols_blocks_q8 == nullptr) continue;
      const std::string tname = std::string(table->name) + (widen ? "-widen" : "");
      for (tf::kernels::WeightType t : tf::kernels::kBlockTypes) {
        const std::string name(tf::kernels::weight_type_name(t));
        benchmark::RegisterBenchmark(("blocks_gemv/" + tname + "/" + name).c_str(), run_blocks_gemv,
                                     table, t, widen)
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("blocks_gemm/" + tname + "/" + name).c_str(), run_blocks_gemm,
                                     table, t, widen)
            ->Args({512, 768, 768})
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  std::vector<const IsaKernels*> tables = {&tf::kernels::kPortableKernels};
  const auto& f = tf::cpu_features();
  if (f.has_avx2_kernels()) tables.push_back(&tf::kernels::kAvx2Kernels);
  if (f.has_avx512_kernels()) tables.push_back(&tf::kernels::kAvx512Kernels);
  for (const IsaKernels* t : tables) {
    auto* b =
        benchmark::RegisterBenchmark((std::string("matmul/") + t->name).c_str(), run_matmul, t);
    b->Args({1, 2048, 768})->Args({1, 768, 768})->Args({16, 2048, 768})->Args({128, 768, 768});
    b->Args({512, 768, 768})->Args({512, 768, 2048})->Args({512, 2048, 2048});
    b->Args({4, 64, 768})->Args({16, 64, 768})->Args({64, 16, 768})->Args({16, 16, 256});
    b->Unit(benchmark::kMicrosecond);
  }
  for (const IsaKernels* t : tf::kernels::supported_tables()) {
    if (t->tiles == nullptr) continue;
    for (auto wt : {tf::kernels::WeightType::kBF16}) {  // the quantized types: panels/ below
      auto* b = benchmark::RegisterBenchmark(
          (std::string("tiles/") + t->name + "/" + std::string(tf::kernels::weight_type_name(wt)))
              .c_str(),
          run_tiles, t, wt);
      b->Args({1, 2048, 768})->Args({1, 4096, 4096})->Args({16, 2048, 768});
      b->Args({512, 768, 768})->Args({512, 2048, 768})->Args({512, 768, 2048});
      b->Args({512, 2048, 2048})->Args({512, 5632, 2048});
      b->Unit(benchmark::kMicrosecond);
    }
  }
  for (const IsaKernels* t : tf::kernels::supported_tables()) {
    if (t->matmul_cols_panels == nullptr) continue;
    for (auto wt : {tf::kernels::WeightType::kQ4_0, tf::kernels::WeightType::kQ8_0,
                    tf::kernels::WeightType::kQ4_K, tf::kernels::WeightType::kQ5_K,
                    tf::kernels::WeightType::kQ6_K, tf::kernels::WeightType::kIQ4_NL,
                    tf::kernels::WeightType::kIQ4_XS}) {
      auto* b = benchmark::RegisterBenchmark(
          (std::string("panels/") + t->name + "/" + std::string(tf::kernels::weight_type_name(wt)))
              .c_str(),
          run_panels, t, wt);
      b->Args({1, 2048, 768})->Args({1, 4096, 4096})->Args({4, 2048, 768})->Args({16, 2048, 768});
      b->Args({512, 2048, 2048})->Args({512, 5632, 2048});
      b->Unit(benchmark::kMicrosecond);
    }
  }
}

// Attention of one KV head, one thread: range(0) = queries 0..T-1 of a causal prefill (T
// tokens, tasks of range(1) consecutive queries, as transformer::attention groups a prompt's
// tokens), or with range(1) = 0 one query at position T (decode). head_dim range(2).
void run_attention(benchmark::State& state, const IsaKernels* isa, tf::kernels::KvType type) {
  const int64_t t = state.range(0), group = state.range(1);
  const int hd = static_cast<int>(state.range(2));
  constexpr int kBlock = 16;
  const int64_t ctx = t + 1, blocks = (ctx + kBlock - 1) / kBlock;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint8_t> k(blocks * kBlock * hd * 4), v(k.size());
  std::vector<float> q(ctx * hd), out(ctx * hd);
  for (auto& x : q) x = dist(rng);
  const int es = tf::kernels::kv_type_size(type);
  for (size_t i = 0; i + es <= k.size(); i += es) {
    const float a = dist(rng), b = dist(rng);
    if (es == 4) {
      std::memcpy(&k[i], &a, 4);
      std::memcpy(&v[i], &b, 4);
    } else {  // bf16 / f16 bits of a modest value: the top half of the f32 works for bf16 only,
              // so f16 takes a fixed pattern of normal numbers
      const uint16_t ka = type == tf::kernels::KvType::kBF16
                              ? static_cast<uint16_t>(std::bit_cast<uint32_t>(a) >> 16)
                              : static_cast<uint16_t>(0x3000 + (rng() & 0x0fff));
      const uint16_t vb = type == tf::kernels::KvType::kBF16
                              ? static_cast<uint16_t>(std::bit_cast<uint32_t>(b) >> 16)
                              : static_cast<uint16_t>(0x3000 + (rng() & 0x0fff));
      std::memcpy(&k[i], &ka, 2);
      std::memcpy(&v[i], &vb, 2);
    }
  }
  std::vector<int32_t> table(blocks);
  for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(blocks - 1 - b);
  tf::kernels::PagedKvLayer kv{k.data(), v.data(), kBlock, hd, type};
  const tf::kernels::AttentionOpts opts(0.125f);
  double flops = 0;
  for (auto _ : state) {
    flops = 0;
    if (group == 0) {
      const float* qs[1] = {q.data()};
      float* os[1] = {out.data()};
      const int64_t n[1] = {ctx};
      isa->attend_queries(qs, n, 1, kv, table.data(), 0, hd, opts, os);
      flops = 4.0 * ctx * hd;
    } else {
      for (int64_t f = 0; f < t; f += group) {
        const float* qs[tf::kernels::kMaxAttentionQueries];
        float* os[tf::kernels::kMaxAttentionQueries];
        int64_t n[tf::kernels::kMaxAttentionQueries];
        const int64_t cnt = std::min(group, t - f);
        for (int64_t r = 0; r < cnt; ++r) {
          qs[r] = q.data() + (f + r) * hd;
          os[r] = out.data() + (f + r) * hd;
          n[r] = f + r + 1;
          flops += 4.0 * n[r] * hd;
        }
        isa->attend_queries(qs, n, static_cast<int>(cnt), kv, table.data(), 0, hd, opts, os);
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// The activation quantizer of the block and panel kernels (Q8_0 blocks with their sums), one
// thread: range(0) rows of range(1) floats, with the AMX tiles' layout when range(2) is 1.
void run_quantize_activations(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1);
  const Operands o(m, 1, k);
  tf::kernels::BlockQ8Buffer buf;
  tf::kernels::prepare_block_activations(m, k, buf, state.range(2) != 0);
  for (auto _ : state) {
    for (int64_t i = 0; i < m; ++i) tf::kernels::quantize_block_row(o.x.data(), i, buf);
    benchmark::DoNotOptimize(buf.rows.q);
  }
  state.counters["GB/s(x)"] = benchmark::Counter(
      4.0 * m * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// Batched decode's attention over a cache larger than the caches, in two layouts: range(0)
// sequences of range(1) positions, 12 heads of 64, bf16, one query per sequence and head, one
// thread. range(2) = 0: rows of all heads side by side (tokenflow's layout, a head's slice of a
// row kv_dim apart from the next); 1: each head's rows contiguous within a block (vLLM's
// [block][head][position][head_dim]; emulated by one layer per head).
void run_attention_layout(benchmark::State& state) {
  const int64_t seqs = state.range(0), ctx = state.range(1);
  const bool per_head = state.range(2) != 0;
  constexpr int kHeads = 12, kHd = 64, kBlock = 16;
  const int64_t blocks = seqs * ((ctx + kBlock - 1) / kBlock);
  std::vector<uint16_t> k(blocks * kBlock * kHeads * kHd, 0x3c00), v(k.size(), 0x3c00);
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(3));
  std::vector<float> q(kHd, 0.01f), out(kHd);
  const tf::kernels::AttentionOpts opts(0.125f);
  const tf::kernels::IsaKernels& isa = tf::kernels::isa();
  const int64_t per_seq = blocks / seqs, head_elems = blocks * kBlock * kHd;
  for (auto _ : state) {
    for (int64_t s = 0; s < seqs; ++s) {
      const int32_t* t = table.data() + s * per_seq;
      for (int h = 0; h < kHeads; ++h) {
        const float* qs[1] = {q.data()};
        float* os[1] = {out.data()};
        const int64_t n[1] = {ctx};
        if (per_head) {
          tf::kernels::PagedKvLayer kv{k.data() + h * head_elems, v.data() + h * head_elems, kBlock,
                                       kHd, tf::kernels::KvType::kBF16};
          isa.attend_queries(qs, n, 1, kv, t, 0, kHd, opts, os);
        } else {
          tf::kernels::PagedKvLayer kv{k.data(), v.data(), kBlock, kHeads * kHd,
                                       tf::kernels::KvType::kBF16};
          isa.attend_queries(qs, n, 1, kv, t, h, kHd, opts, os);
        }
        benchmark::DoNotOptimize(out.data());
      }
    }
  }
  state.counters["GB/s(kv)"] = benchmark::Counter(4.0 * seqs * ctx * kHeads * kHd,
                                                  benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1000);
}

void register_attention() {
  benchmark::RegisterBenchmark("attention_layout", run_attention_layout)
      ->Args({32, 512, 0})
      ->Args({32, 512, 1})
      ->Args({4, 2048, 0})
      ->Args({4, 2048, 1})
      ->Args({1, 256, 0})  // 768 KiB: from the caches, the arithmetic's own speed
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("quantize_activations", run_quantize_activations)
      ->Args({32, 768, 0})
      ->Args({512, 2048, 1})
      ->Unit(benchmark::kMicrosecond);
  for (const IsaKernels* t : tf::kernels::supported_tables()) {
    for (auto kt : {tf::kernels::KvType::kF32, tf::kernels::KvType::kBF16}) {
      auto* b = benchmark::RegisterBenchmark((std::string("attention/") + t->name + "/" +
                                              (kt == tf::kernels::KvType::kF32 ? "f32" : "bf16"))
                                                 .c_str(),
                                             run_attention, t, kt);
      b->Args({512, 4, 64})->Args({512, 4, 128})->Args({2048, 0, 64})->Args({2048, 0, 128});
      b->Args({80, 0, 64});
      b->Unit(benchmark::kMicrosecond);
    }
  }
}

// A decode step's LoRA corrections (llama.cc's lora_add) at TinyLlama-1.1B's shapes: 8
// adapters of rank 16 on q, k, v, o, gate, up and down of 22 layers, 4 rows each (32
// sequences), A and B in f32, bf16 or f16. mode 0: each group's two
// products split over the pool (two dispatches per group); mode 1: one dispatch per projection,
// a group per piece, its products inline. Time per step.
void run_lora_step(benchmark::State& state) {
  const bool grouped = state.range(0) == 1;
  const tf::kernels::WeightType types[] = {
      tf::kernels::WeightType::kF32, tf::kernels::WeightType::kBF16, tf::kernels::WeightType::kF16};
  const auto type = types[state.range(1)];
  constexpr int64_t kGroups = 8, kRows = 4, kRank = 16, kLayers = 22;
  const std::pair<int64_t, int64_t> shapes[] = {{2048, 2048}, {256, 2048},  {256, 2048},
                                                {2048, 2048}, {5632, 2048}, {5632, 2048},
                                                {2048, 5632}};  // (out, in)
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
  struct Pair {
    tf::kernels::LoadedMatrix a, b;
  };
  std::vector<Pair> pairs;  // [layer][target][group]
  for (int64_t l = 0; l < kLayers; ++l)
    for (const auto& [out, in] : shapes)
      for (int64_t g = 0; g < kGroups; ++g) {
        std::vector<float> a(kRank * in), b(out * kRank);
        for (auto& v : a) v = dist(rng);
        for (auto& v : b) v = dist(rng);
        Pair p{tf::kernels::load_like_the_loader(type, a.data(), kRank, in),
               tf::kernels::load_like_the_loader(type, b.data(), out, kRank)};
        p.a.rebind();
        p.b.rebind();
        pairs.push_back(std::move(p));
      }
  std::vector<float> x(kGroups * kRows * 5632), y(kGroups * kRows * 5632),
      t(kGroups * kRows * kRank);
  for (auto& v : x) v = dist(rng);
  tf::ThreadPool pool(2);
  for (auto _ : state) {
    size_t i = 0;
    for (int64_t l = 0; l < kLayers; ++l)
      for (const auto& [out, in] : shapes) {
        auto apply = [&, out = out, in = in](int64_t g, tf::ThreadPool& on) {
          const Pair& p = pairs[i + static_cast<size_t>(g)];
          float* tg = t.data() + g * kRows * kRank;
          tf::kernels::matmul(x.data() + g * kRows * in, kRows, p.a.m, nullptr, tg, on);
          tf::kernels::matmul_add(tg, kRows, p.b.m, nullptr, y.data() + g * kRows * out, on);
        };
        if (grouped) {
          pool.parallel_for(kGroups, [&](int64_t g0, int64_t g1) {
            for (int64_t g = g0; g < g1; ++g) apply(g, pool);
          });
        } else {
          for (int64_t g = 0; g < kGroups; ++g) apply(g, pool);
        }
        i += kGroups;
      }
    benchmark::DoNotOptimize(y.data());
  }
}

void register_lora() {
  benchmark::RegisterBenchmark("lora_step", run_lora_step)
      ->ArgNames({"grouped", "type"})  // type: 0 f32, 1 bf16, 2 f16
      ->Args({0, 0})
      ->Args({1, 0})
      ->Args({0, 1})
      ->Args({1, 1})
      ->Args({0, 2})
      ->Args({1, 2})
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  register_lora();
  register_all();
  register_attention();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
