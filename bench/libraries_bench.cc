// tokenflow's matmul against the libraries Debian ships (OpenBLAS, oneDNN) on the same shapes
// and threads: what a library would buy per dtype, and whether it keeps tokenflow's promise that a
// row's result does not depend on the rows beside it (batch invariance).
//
//   OMP_NUM_THREADS=2 bench_libraries [threads]
//
// Built only where libopenblas-dev and / or libdnnl-dev are installed (neither is a dependency of
// the server; docs/dependencies.md). oneDNN runs on OpenMP: set OMP_NUM_THREADS to the same count.
//
// Each product is y[m, n] = x[m, k] · w[n, k]ᵀ with f32 activations and outputs. The libraries get
// their operands in their own formats, converted before the clock starts (bf16 activations, u8
// activations with one scale); tokenflow converts and quantizes its activations inside the timed
// call, as it does when serving. GFLOP/s counts 2 m n k; the best of several runs.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "core/timing.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"

#ifdef TF_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef TF_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

using tf::kernels::WeightType;

// One multiplier of a shape: run(x, m, y) for any m up to the shape's.
struct Multiplier {
  std::string name;
  std::function<void(const float* x, int64_t m, float* y)> run;
};

// Whether row 0 of an m-row product equals, bit for bit, the same row multiplied alone and in a
// batch of 7.
bool batch_invariant(const Multiplier& mul, const std::vector<float>& x, int64_t m, int64_t n) {
  std::vector<float> all(static_cast<size_t>(m * n)), one(static_cast<size_t>(n)),
      seven(static_cast<size_t>(7 * n));
  mul.run(x.data(), m, all.data());
  mul.run(x.data(), 1, one.data());
  mul.run(x.data(), 7, seven.data());
  return std::memcmp(all.data(), one.data(), n * sizeof(float)) == 0 &&
         std::memcmp(all.data(), seven.data(), n * sizeof(float)) == 0;
}

#ifdef TF_HAVE_DNNL
// A oneDNN matmul of m rows; primitives (and the weights in the layout each picks) are made per
// m, since oneDNN's shapes are fixed, and cached.
struct DnnlMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::memory::data_type src_t, wei_t;
  const float* wf;
  int64_t n, k;
  float scale = 1.0f;
  struct Prim {
    int64_t m;
    dnnl::matmul p;
    dnnl::memory weights;
  };
  std::vector<Prim> prims;
  std::vector<uint16_t> x_half;
  std::vector<uint8_t> x_u8;
  const float* x_f32 = nullptr;

  DnnlMatmul(dnnl::memory::data_type s, dnnl::memory::data_type w, const float* wf_, int64_t n_,
             int64_t k_)
      : src_t(s), wei_t(w), wf(wf_), n(n_), k(k_) {
    if (wei_t == dnnl::memory::data_type::s8) {  // symmetric int8 weights, one scale
      float mx = 0;
      for (int64_t i = 0; i < n * k; ++i) mx = std::max(mx, std::fabs(wf[i]));
      scale = mx / 127.0f;
    }
  }
  Prim& primitive(int64_t m) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    for (auto& p : prims)
      if (p.m == m) return p;
    dnnl::memory::desc src({m, k}, src_t, tag::ab), wei({k, n}, wei_t, tag::any),
        dst({m, n}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    // u8 activations quantized with one scale of 1/64 (the bench's activations are in [-1, 1]).
    if (wei_t == dt::s8) attr.set_output_scales(0, {scale / 64.0f});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, eng);
    // Weights w[n, k] are the [k, n] operand transposed (strides 1, k), reordered (and for s8
    // quantized) into the layout the primitive chose.
    dnnl::memory f32_mem({{k, n}, dt::f32, dnnl::memory::dims{1, k}}, eng, const_cast<float*>(wf));
    dnnl::memory weights(pd.weights_desc(), eng);
    dnnl::primitive_attr rattr;
    if (wei_t == dt::s8) rattr.set_output_scales(0, {1.0f / scale});
    dnnl::reorder(dnnl::reorder::primitive_desc(f32_mem, weights, rattr))
        .execute(strm, f32_mem, weights);
    strm.wait();
    prims.push_back({m, dnnl::matmul(pd), weights});
    return prims.back();
  }
  // Converts x to the source type (outside the clock: prepare() first).
  void prepare(const float* x, int64_t m) {
    using dt = dnnl::memory::data_type;
    x_f32 = x;
    if (src_t == dt::bf16) {
      x_half.resize(static_cast<size_t>(m * k));
      for (int64_t i = 0; i < m * k; ++i) x_half[i] = tf::f32_to_bf16(x[i]);
    } else if (src_t == dt::u8) {
      x_u8.resize(static_cast<size_t>(m * k));
      for (int64_t i = 0; i < m * k; ++i)
        x_u8[i] = static_cast<uint8_t>(std::clamp(std::lround(x[i] * 64.0f) + 128, 0L, 255L));
    }
  }
  void run(int64_t m, float* y) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    void* src = src_t == dt::f32    ? const_cast<float*>(x_f32)
                : src_t == dt::bf16 ? static_cast<void*>(x_half.data())
                                    : static_cast<void*>(x_u8.data());
    Prim& p = primitive(m);
    dnnl::memory s({{m, k}, src_t, tag::ab}, eng, src), d({{m, n}, dt::f32, tag::ab}, eng, y);
    p.p.execute(strm, {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, p.weights}, {DNNL_ARG_DST, d}});
    strm.wait();
  }
};
#endif

struct Row {
  std::string shape, dtype, who;
  double gflops;
  bool invariant;
};

void measure(std::vector<Row>& rows, const std::string& shape, const std::string& dtype,
             const Multiplier& mul, const std::vector<float>& x, int64_t m, int64_t n, int64_t k,
             int reps) {
  std::vector<float> y(static_cast<size_t>(m * n));
  mul.run(x.data(), m, y.data());  // warm up (first touch, a library's kernel selection)
  const double s = tf::best_seconds(reps, [&] { mul.run(x.data(), m, y.data()); });
  rows.push_back(
      {shape, dtype, mul.name, 2.0 * m * n * k / s / 1e9, batch_invariant(mul, x, m, n)});
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  tf::ThreadPool pool(threads);
#ifdef TF_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
#endif
  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::printf("kernels %s, %d threads; OMP_NUM_THREADS=%s\n", tf::kernels::isa().name, threads,
              omp != nullptr ? omp : "(unset: oneDNN takes every CPU)");

  struct Shape {
    int64_t m, n, k;
    int reps;
  };
  const Shape shapes[] = {{512, 2048, 2048, 5}, {512, 5632, 2048, 3}, {1, 4096, 4096, 20}};
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::uniform_real_distribution<float> xd(-1.0f, 1.0f);
  std::vector<Row> rows;
  for (const Shape& sh : shapes) {
    const std::string shape =
        std::to_string(sh.m) + "x" + std::to_string(sh.n) + "x" + std::to_string(sh.k);
    std::vector<float> w(static_cast<size_t>(sh.n * sh.k)), x(static_cast<size_t>(64 * sh.k));
    for (auto& v : w) v = dist(rng);
    for (auto& v : x) v = xd(rng);
    std::vector<float> xm(static_cast<size_t>(sh.m * sh.k));
    for (int64_t i = 0; i < sh.m * sh.k; ++i) xm[i] = x[i % x.size()];
    // For the invariance check, m <= 64 distinct rows.
    for (WeightType t : {WeightType::kF32, WeightType::kBF16, WeightType::kI8}) {
      const std::string dtype(tf::kernels::weight_type_name(t));
      tf::kernels::LoadedMatrix lm = tf::kernels::load_like_the_loader(t, w.data(), sh.n, sh.k);
      const Multiplier ours{"tokenflow", [&](const float* xx, int64_t m, float* y) {
                              tf::kernels::matmul(xx, m, lm.m, nullptr, y, pool);
                            }};
      measure(rows, shape, dtype, ours, sh.m == 1 ? x : xm, sh.m, sh.n, sh.k, sh.reps);
#ifdef TF_HAVE_OPENBLAS
      if (t == WeightType::kF32) {
        const Multiplier blas{"OpenBLAS sgemm", [&](const float* xx, int64_t m, float* y) {
                                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, sh.n, sh.k,
                                            1.0f, xx, sh.k, w.data(), sh.k, 0.0f, y, sh.n);
                              }};
        measure(rows, shape, dtype, blas, sh.m == 1 ? x : xm, sh.m, sh.n, sh.k, sh.reps);
      }
#endif
#ifdef TF_HAVE_DNNL
      using dt = dnnl::memory::data_type;
      const dt st = t == WeightType::kF32 ? dt::f32 : t == WeightType::kBF16 ? dt::bf16 : dt::u8;
      const dt wt = t == WeightType::kF32 ? dt::f32 : t == WeightType::kBF16 ? dt::bf16 : dt::s8;
      try {
        DnnlMatmul dm(st, wt, w.data(), sh.n, sh.k);
        const std::vector<float>& xs = sh.m == 1 ? x : xm;
        dm.prepare(xs.data(), std::max<int64_t>(sh.m, 64));
        const Multiplier one{"oneDNN", [&](const float*, int64_t m, float* y) { dm.run(m, y); }};
        measure(rows, shape, dtype, one, xs, sh.m, sh.n, sh.k, sh.reps);
      } catch (const dnnl::error& e) {
        std::printf("oneDNN %s %s: %s\n", shape.c_str(), dtype.c_str(), e.what());
      }
#endif
    }
  }
  std::printf(
      "\n| m x n x k | dtype | library | GFLOP/s | row results independent of the batch |\n"
      "|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %s | %s | %.0f | %s |\n", r.shape.c_str(), r.dtype.c_str(), r.who.c_str(),
                r.gflops, r.invariant ? "yes" : "no");
  return 0;
}
