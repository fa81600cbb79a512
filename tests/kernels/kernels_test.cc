#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/amx.h"
#include "kernels/attention.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace tf::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_vector(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// |got - want| <= tol * scale, where scale is the sum of the magnitudes of the terms (so that
// cancellation does not turn a tiny absolute error into a huge relative one).
::testing::AssertionResult close(double got, double want, double scale, double tol = 1e-5) {
  if (std::isnan(got) || std::fabs(got - want) > tol * std::max(scale, 1e-30)) {
    return ::testing::AssertionFailure()
           << "got " << got << ", want " << want << " (scale " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(Isa, DispatchPicksTheBestSupportedTable) {
  const auto tables = supported_tables();
  EXPECT_STREQ(isa().name, tables.back()->name) << cpu_features().to_string();
  EXPECT_STREQ(kPortableKernels.name, "portable");
#if defined(__x86_64__)
  EXPECT_STREQ(kAvx2Kernels.name, "avx2");
  EXPECT_STREQ(kAvx2VnniKernels.name, "avx2-vnni");
  EXPECT_NE(kAvx2Kernels.matmul_cols_blocks_q8, nullptr);
  EXPECT_NE(kAvx2VnniKernels.matmul_cols_blocks_q8, nullptr);
  EXPECT_NE(kAvx512Kernels.matmul_cols_blocks_q8, nullptr);
  EXPECT_NE(kAvx512Bf16Kernels.matmul_cols_blocks_q8, nullptr);
  EXPECT_STREQ(kAvx512Kernels.name, "avx512");
  EXPECT_STREQ(kAvx512VnniKernels.name, "avx512-vnni");
  EXPECT_EQ(kAvx512Kernels.matmul_cols_q8, nullptr);
  EXPECT_NE(kAvx512VnniKernels.matmul_cols_q8, nullptr);
  EXPECT_EQ(kAvx512VnniKernels.matmul_cols_bf16, nullptr);
  EXPECT_STREQ(kAvx512Bf16Kernels.name, "avx512-bf16");
  EXPECT_NE(kAvx512Bf16Kernels.matmul_cols_bf16, nullptr);
  EXPECT_STREQ(amx_kernels().name, "amx");
  EXPECT_NE(amx_kernels().tiles, nullptr);
  EXPECT_EQ(amx_kernels().tiles->col_granule, 16);
  EXPECT_EQ(kAvx512Bf16Kernels.tiles, nullptr);
#endif
}

// Every compiled table is either exercised by the tests in this file and weights_test.cc (they
// loop over supported_tables()) or reported here as skipped, with what the CPU lacks, so that a
// run on an AVX2-only machine says which tables it could not test.
struct TableCase {
  const IsaKernels* table;
  const char* needs;
  bool (*runs_here)();
};

class KernelTable : public ::testing::TestWithParam<TableCase> {};

TEST_P(KernelTable, IsTestedWhereTheCpuRunsIt) {
  const TableCase& c = GetParam();
  const auto tables = supported_tables();
  const bool listed = std::find(tables.begin(), tables.end(), c.table) != tables.end();
  if (!c.runs_here()) {
    ASSERT_FALSE(listed) << c.table->name << " is dispatched without " << c.needs;
    // scripts/test.sh amx: on an AMX host its table must be tested, never skipped.
    ASSERT_FALSE(std::getenv("TF_REQUIRE_AMX") != nullptr && std::string(c.table->name) == "amx")
        << "TF_REQUIRE_AMX is set, but this CPU (or Linux) gives no AMX tiles ("
        << cpu_features().to_string() << ")";
    GTEST_SKIP() << "this CPU (or TOKENFLOW_ISA) lacks " << c.needs << ": the " << c.table->name
                 << " kernel table is not tested here (" << cpu_features().to_string() << ")";
  }
  EXPECT_TRUE(listed) << c.table->name << " runs here but the kernel tests would not reach it";
}

std::vector<TableCase> all_tables() {
  std::vector<TableCase> out = {{&kPortableKernels, "nothing", [] { return true; }}};
#if defined(__x86_64__)
  out.push_back(
      {&kAvx2Kernels, "AVX2 + FMA + F16C", [] { return cpu_features().has_avx2_kernels(); }});
  out.push_back({&kAvx2VnniKernels, "AVX2 + FMA + F16C + AVX-VNNI",
                 [] { return cpu_features().has_avx2_kernels() && cpu_features().avx_vnni; }});
  out.push_back(
      {&kAvx512Kernels, "AVX-512 F/BW/DQ/VL", [] { return cpu_features().has_avx512_kernels(); }});
  out.push_back({&kAvx512VnniKernels, "AVX-512 VNNI",
                 [] { return cpu_features().has_avx512_kernels() && cpu_features().avx512_vnni; }});
  out.push_back({&kAvx512Bf16Kernels, "AVX-512 VNNI + BF16", [] {
                   const CpuFeatures& f = cpu_features();
                   return f.has_avx512_kernels() && f.avx512_vnni && f.avx512_bf16;
                 }});
  out.push_back({&amx_kernels(), "AVX-512 VNNI + BF16, AMX tiles + bf16 granted by Linux", [] {
                   const CpuFeatures& f = cpu_features();
                   return f.has_avx512_kernels() && f.avx512_vnni && f.avx512_bf16 && amx_enable();
                 }});
#endif
  return out;
}

INSTANTIATE_TEST_SUITE_P(Every, KernelTable, ::testing::ValuesIn(all_tables()),
                         [](const ::testing::TestParamInfo<TableCase>& info) {
                           std::string name = info.param.table->name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// --- matmul_cols ------------------------------------------------------------------------------

struct MatmulCase {
  std::vector<float> x, w, bias;
};

// x and w are followed by NaNs: reading past the end of a row block poisons the result.
MatmulCase make_case(int64_t m, int64_t k, int64_t n, std::mt19937& rng) {
  MatmulCase c;
  c.x = random_vector(m * k, rng);
  c.w = random_vector(n * k, rng);
  c.bias = random_vector(n, rng);
  c.x.resize(m * k + 32, kNaN);
  c.w.resize(n * k + 32, kNaN);
  c.bias.resize(n + 32, kNaN);
  return c;
}

tf::kernels::WeightMatrix f32_weights(const std::vector<float>& w, int64_t n, int64_t k) {
  return {tf::kernels::WeightType::kF32, w.data(), nullptr, n, k};
}

// Returns {value, sum of |terms|}.
std::pair<double, double> reference_dot(const float* x, const float* w, int64_t k,
                                        const float* bias, int64_t j) {
  double s = 0.0, mag = 0.0;
  for (int64_t p = 0; p < k; ++p) {
    s += static_cast<double>(x[p]) * w[p];
    mag += std::fabs(static_cast<double>(x[p]) * w[p]);
  }
  if (bias != nullptr) {
    s += bias[j];
    mag += std::fabs(bias[j]);
  }
  return {s, mag};
}

TEST(IsaKernels, MatmulColsMatchesReference) {
  std::mt19937 rng(1234);
  for (const IsaKernels* t : supported_tables()) {
    for (int64_t m : {1, 2, 3, 4, 5, 9}) {
      for (int64_t k : {1, 3, 7, 8, 15, 16, 17, 64, 72, 100}) {
        for (int64_t n : {1, 3, 4, 5, 17}) {
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(std::string(t->name) + " m=" + std::to_string(m) +
                         " k=" + std::to_string(k) + " n=" + std::to_string(n) +
                         (with_bias ? " bias" : ""));
            const MatmulCase c = make_case(m, k, n, rng);
            const float* bias = with_bias ? c.bias.data() : nullptr;
            std::vector<float> y(m * n, kNaN);
            t->matmul_cols(c.x.data(), m, k, f32_weights(c.w, n, k), 0, n, bias, y.data(), n,
                           false);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                const auto [want, mag] = reference_dot(&c.x[i * k], &c.w[j * k], k, bias, j);
                ASSERT_TRUE(close(y[i * n + j], want, mag)) << "y[" << i << ", " << j << "]";
              }
            }
          }
        }
      }
    }
  }
}

TEST(IsaKernels, MatmulColsSubRangeLeavesOtherOutputsAlone) {
  std::mt19937 rng(99);
  constexpr float kSentinel = 12345.5f;
  for (const IsaKernels* t : supported_tables()) {
    for (int64_t m : {1, 3, 5}) {
      for (int64_t k : {7, 16, 33}) {
        const int64_t n = 17;
        const int64_t ldy = n + 3;  // padded rows: the padding must not be written either
        const MatmulCase c = make_case(m, k, n, rng);
        for (auto [nb, ne] : {std::pair<int64_t, int64_t>{0, 4},
                              {1, 6},
                              {4, 8},
                              {5, 17},
                              {3, 16},
                              {16, 17},
                              {6, 6},
                              {2, 15}}) {
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(std::string(t->name) + " m=" + std::to_string(m) +
                         " k=" + std::to_string(k) + " range=[" + std::to_string(nb) + "," +
                         std::to_string(ne) + ")" + (with_bias ? " bias" : ""));
            const float* bias = with_bias ? c.bias.data() : nullptr;
            std::vector<float> y(m * ldy, kSentinel);
            t->matmul_cols(c.x.data(), m, k, f32_weights(c.w, n, k), nb, ne, bias, y.data(), ldy,
                           false);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < ldy; ++j) {
                const float got = y[i * ldy + j];
                if (j >= nb && j < ne) {
                  const auto [want, mag] = reference_dot(&c.x[i * k], &c.w[j * k], k, bias, j);
                  ASSERT_TRUE(close(got, want, mag)) << "y[" << i << ", " << j << "]";
                } else {
                  ASSERT_EQ(got, kSentinel) << "y[" << i << ", " << j << "] was written";
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(IsaKernels, DotMatchesReference) {
  std::mt19937 rng(7);
  for (const IsaKernels* t : supported_tables()) {
    for (int64_t n = 0; n <= 70; ++n) {
      SCOPED_TRACE(std::string(t->name) + " n=" + std::to_string(n));
      auto a = random_vector(n, rng);
      auto b = random_vector(n, rng);
      a.resize(n + 32, kNaN);  // reading past n would give NaN
      b.resize(n + 32, kNaN);
      const auto [want, mag] = reference_dot(a.data(), b.data(), n, nullptr, 0);
      const float got = t->dot(a.data(), b.data(), n);
      if (n == 0) {
        EXPECT_EQ(got, 0.0f);
      } else {
        EXPECT_TRUE(close(got, want, mag));
      }
    }
  }
}

// The roofline's read loop sums every element once and nothing past n, with or without fetching
// ahead (a loop that skipped data would report a bandwidth it never reached).
TEST(IsaKernels, ReadPeakSumsEveryElementOnce) {
  for (const IsaKernels* t : supported_tables()) {
    for (int64_t n : {0, 1, 15, 16, 127, 128, 129, 1000, 4099}) {
      for (int64_t ahead : {0, 1024}) {
        SCOPED_TRACE(std::string(t->name) + " n=" + std::to_string(n) +
                     " ahead=" + std::to_string(ahead));
        std::vector<float> a(static_cast<size_t>(n) + 64, kNaN);  // reading past n: NaN
        double want = 0;
        for (int64_t i = 0; i < n; ++i) {
          a[i] = static_cast<float>(i % 7) - 2.0f;  // small integers: every order sums exactly
          want += a[i];
        }
        EXPECT_EQ(t->read_peak(a.data(), n, ahead), static_cast<float>(want));
      }
    }
  }
}

TEST(IsaKernels, AxpyMatchesReference) {
  std::mt19937 rng(8);
  constexpr float kSentinel = -777.25f;
  for (const IsaKernels* t : supported_tables()) {
    for (int64_t n = 0; n <= 70; ++n) {
      SCOPED_TRACE(std::string(t->name) + " n=" + std::to_string(n));
      auto x = random_vector(n, rng);
      auto y = random_vector(n, rng);
      const auto y0 = y;
      x.resize(n + 32, kNaN);
      y.resize(n + 32, kSentinel);
      const float a = 0.75f - static_cast<float>(n % 5);
      t->axpy(a, x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double ax = static_cast<double>(a) * x[i];
        ASSERT_TRUE(close(y[i], y0[i] + ax, std::fabs(y0[i]) + std::fabs(ax))) << "i=" << i;
      }
      for (int64_t i = n; i < n + 32; ++i) ASSERT_EQ(y[i], kSentinel) << "wrote y[" << i << "]";
    }
  }
}

// --- threaded matmul --------------------------------------------------------------------------

TEST(Matmul, ThreadedEqualsSingleThreadBitForBit) {
  std::mt19937 rng(42);
  ThreadPool one(1), two(2), three(3);
  struct Shape {
    int64_t m, k, n;
  };
  for (Shape s : {Shape{1, 4096, 64}, Shape{3, 100, 257}, Shape{1, 64, 1000}, Shape{5, 17, 130},
                  Shape{2, 512, 333}, Shape{9, 72, 5}, Shape{1, 1, 1}}) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE("m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) +
                   " n=" + std::to_string(s.n) + (with_bias ? " bias" : ""));
      const MatmulCase c = make_case(s.m, s.k, s.n, rng);
      const float* bias = with_bias ? c.bias.data() : nullptr;
      std::vector<float> y1(s.m * s.n + 8, kNaN), y2(s.m * s.n + 8, kNaN), y3(s.m * s.n + 8, kNaN);
      matmul(c.x.data(), s.m, s.k, c.w.data(), s.n, bias, y1.data(), one);
      matmul(c.x.data(), s.m, s.k, c.w.data(), s.n, bias, y2.data(), two);
      matmul(c.x.data(), s.m, s.k, c.w.data(), s.n, bias, y3.data(), three);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          const auto [want, mag] = reference_dot(&c.x[i * s.k], &c.w[j * s.k], s.k, bias, j);
          ASSERT_TRUE(close(y1[i * s.n + j], want, mag)) << "y[" << i << ", " << j << "]";
        }
      }
      EXPECT_EQ(std::memcmp(y1.data(), y2.data(), s.m * s.n * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(y1.data(), y3.data(), s.m * s.n * sizeof(float)), 0);
      for (size_t i = s.m * s.n; i < y1.size(); ++i) {
        EXPECT_TRUE(std::isnan(y2[i]) && std::isnan(y3[i])) << "wrote past y at " << i;
      }
    }
  }
}

// --- ops --------------------------------------------------------------------------------------

TEST(Ops, RmsNorm) {
  std::mt19937 rng(3);
  for (int64_t n : {1, 7, 64, 333}) {
    const auto x = random_vector(n, rng, -3.0f, 3.0f);
    const auto w = random_vector(n, rng, 0.5f, 1.5f);
    const float eps = 1e-5f;
    std::vector<float> y(n + 1, kNaN);
    rms_norm(x.data(), w.data(), eps, n, y.data());
    double ss = 0.0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; ++i) {
      const double want = x[i] * inv * w[i];
      ASSERT_TRUE(close(y[i], want, std::fabs(want))) << "n=" << n << " i=" << i;
    }
    EXPECT_TRUE(std::isnan(y[n]));
  }
  // eps matters for a zero input: no division by zero.
  std::vector<float> zeros(8, 0.0f), ones(8, 1.0f), y(8, kNaN);
  rms_norm(zeros.data(), ones.data(), 1e-6f, 8, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
  // In place (the model normalizes into the same buffer).
  std::vector<float> v = {3.0f, 4.0f};
  std::vector<float> w = {1.0f, 2.0f};
  rms_norm(v.data(), w.data(), 0.0f, 2, v.data());
  const double r = std::sqrt((9.0 + 16.0) / 2.0);
  EXPECT_TRUE(close(v[0], 3.0 / r, 1.0));
  EXPECT_TRUE(close(v[1], 8.0 / r, 1.0));
}

TEST(Ops, LayerNormWithAndWithoutBias) {
  std::mt19937 rng(4);
  for (int64_t n : {1, 5, 64, 768}) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (with_bias ? " bias" : ""));
      const auto x = random_vector(n, rng, -2.0f, 4.0f);
      const auto w = random_vector(n, rng, 0.5f, 1.5f);
      const auto b = random_vector(n, rng);
      const float eps = 1e-5f;
      std::vector<float> y(n, kNaN);
      layer_norm(x.data(), w.data(), with_bias ? b.data() : nullptr, eps, n, y.data());
      double mean = 0.0;
      for (float v : x) mean += v;
      mean /= n;
      double var = 0.0;
      for (float v : x) var += (v - mean) * (v - mean);
      var /= n;
      for (int64_t i = 0; i < n; ++i) {
        const double norm = (x[i] - mean) / std::sqrt(var + eps) * w[i];
        const double want = norm + (with_bias ? b[i] : 0.0);
        ASSERT_TRUE(close(y[i], want, std::fabs(norm) + (with_bias ? std::fabs(b[i]) : 0.0) + 1e-6))
            << "i=" << i;
      }
    }
  }
  // A constant row normalizes to the bias.
  std::vector<float> x(4, 5.0f), w(4, 2.0f), b = {1, 2, 3, 4}, y(4, kNaN);
  layer_norm(x.data(), w.data(), b.data(), 1e-5f, 4, y.data());
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y[i], b[i]);
}

// Every table (vector lanes and the scalar elements past them: 37 values) against the formula
// in double.
TEST(Ops, SiluMul) {
  const std::vector<float> edge = {-1000.0f, -20.0f, -2.0f, -0.5f, -0.0f, 0.0f,
                                   0.5f,     1.0f,   3.0f,  20.0f, 80.0f};
  std::mt19937 rng(5);
  std::vector<float> g0 = random_vector(37, rng, -12.0f, 12.0f);
  std::copy(edge.begin(), edge.end(), g0.begin() + 3);
  const auto up = random_vector(g0.size(), rng, -2.0f, 2.0f);
  for (const IsaKernels* t : supported_tables()) {
    auto gate = g0;
    t->silu_mul(gate.data(), up.data(), static_cast<int64_t>(gate.size()));
    for (size_t i = 0; i < gate.size(); ++i) {
      const double g = g0[i];
      const double want = g / (1.0 + std::exp(-g)) * up[i];
      ASSERT_FALSE(std::isnan(gate[i])) << t->name << " g=" << g;
      ASSERT_TRUE(close(gate[i], want, std::fabs(want) + 1e-30)) << t->name << " g=" << g;
    }
  }
}

TEST(Ops, GeluTanh) {
  const double kSqrt2OverPi = std::sqrt(2.0 / 3.14159265358979323846);
  const std::vector<float> anchors = {-1e20f, -50.0f, -6.0f, -3.0f, -1.0f, -0.1f, 0.0f,
                                      0.1f,   0.5f,   1.0f,  2.0f,  5.0f,  50.0f, 1e20f};
  std::mt19937 rng(6);
  // The anchors in vector lanes (from 0) and again past the last whole vector (from 24).
  std::vector<float> x0 = random_vector(38, rng, -8.0f, 8.0f);
  std::copy(anchors.begin(), anchors.end(), x0.begin());
  std::copy(anchors.begin(), anchors.end(), x0.begin() + 24);
  for (const IsaKernels* t : supported_tables()) {
    auto x = x0;
    t->gelu_tanh(x.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x0[i];
      const double want = 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)));
      ASSERT_TRUE(std::isfinite(x[i])) << t->name << " x=" << v;
      ASSERT_NEAR(x[i], want, 5e-7 * std::max(1.0, std::fabs(v))) << t->name << " x=" << v;
    }
    for (size_t at : {size_t{0}, size_t{24}}) {  // a few exact anchors
      EXPECT_EQ(x[at + 6], 0.0f) << t->name;
      EXPECT_EQ(x[at + 13], 1e20f) << t->name;
      EXPECT_NEAR(x[at + 9], 0.8411920f, 1e-6) << t->name;  // gelu_new(1)
    }
  }
}

TEST(Ops, GeluErf) {
  const std::vector<float> anchors = {-1e20f, -50.0f, -6.0f, -3.0f, -1.0f, -0.1f, 0.0f,
                                      0.1f,   0.5f,   1.0f,  2.0f,  5.0f,  50.0f, 1e20f};
  std::mt19937 rng(7);
  // The anchors in vector lanes (from 0) and again past the last whole vector (from 24).
  std::vector<float> x0 = random_vector(38, rng, -8.0f, 8.0f);
  std::copy(anchors.begin(), anchors.end(), x0.begin());
  std::copy(anchors.begin(), anchors.end(), x0.begin() + 24);
  for (const IsaKernels* t : supported_tables()) {
    auto x = x0;
    t->gelu_erf(x.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x0[i];
      const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      ASSERT_TRUE(std::isfinite(x[i])) << t->name << " x=" << v;
      ASSERT_NEAR(x[i], want, 5e-7 * std::max(1.0, std::fabs(v))) << t->name << " x=" << v;
    }
    for (size_t at : {size_t{0}, size_t{24}}) {
      EXPECT_EQ(x[at + 6], 0.0f) << t->name;
      EXPECT_EQ(x[at + 13], 1e20f) << t->name;
      EXPECT_NEAR(x[at + 9], 0.8413447f, 1e-6) << t->name;   // Phi(1)
      EXPECT_NEAR(x[at + 3], -0.0040497f, 1e-6) << t->name;  // -3 Phi(-3)
    }
  }
}

// The softmax's exponentials: every table against exp in double, the sum too.
TEST(Ops, ExpShiftedSum) {
  std::mt19937 rng(8);
  for (int n : {1, 7, 16, 37, 200}) {
    std::vector<float> x0 = random_vector(n, rng, -30.0f, 4.0f);
    if (n > 3) x0[2] = -1e30f;  // far below: 0
    const float top = *std::max_element(x0.begin(), x0.end());
    for (const IsaKernels* t : supported_tables()) {
      auto x = x0;
      const float sum = t->exp_shifted_sum(x.data(), n, top);
      double want_sum = 0.0;
      for (int i = 0; i < n; ++i) {
        const double d = static_cast<double>(x0[i]) - top, want = std::exp(d);
        want_sum += want;
        // x - shift is rounded to float first: a relative error of |d| ulps in its exp.
        ASSERT_NEAR(x[i], want, want * (4e-7 + 1.2e-7 * std::fabs(d)) + 1e-38)
            << t->name << " n=" << n << " i=" << i;
      }
      EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << t->name << " n=" << n;
    }
  }
}

void expect_probabilities(const std::vector<float>& p) {
  double sum = 0.0;
  for (float v : p) {
    ASSERT_FALSE(std::isnan(v));
    ASSERT_GE(v, 0.0f);
    ASSERT_LE(v, 1.0f);
    sum += v;
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

TEST(Ops, SoftmaxMatchesReference) {
  std::mt19937 rng(6);
  for (int64_t n : {1, 2, 5, 100, 1000}) {
    auto x = random_vector(n, rng, -10.0f, 10.0f);
    const auto x0 = x;
    softmax(x.data(), n);
    expect_probabilities(x);
    double mx = *std::max_element(x0.begin(), x0.end());
    double z = 0.0;
    for (float v : x0) z += std::exp(v - mx);
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(x0[i] - mx) / z;
      ASSERT_TRUE(close(x[i], want, want)) << "n=" << n << " i=" << i;
    }
  }
}

TEST(Ops, SoftmaxEdgeCases) {
  {
    std::vector<float> x = {-kInf, -kInf, -kInf, -kInf};
    softmax(x.data(), 4);
    expect_probabilities(x);
  }
  {
    std::vector<float> x = {-kInf, 1.0f, -kInf, 1.0f};
    softmax(x.data(), 4);
    expect_probabilities(x);
    EXPECT_EQ(x[0], 0.0f);
    EXPECT_EQ(x[2], 0.0f);
    EXPECT_FLOAT_EQ(x[1], 0.5f);
    EXPECT_FLOAT_EQ(x[3], 0.5f);
  }
  {
    const float big = std::numeric_limits<float>::max();
    std::vector<float> x = {big, big, -big, 0.0f, 1e30f};
    softmax(x.data(), 5);
    expect_probabilities(x);
    EXPECT_FLOAT_EQ(x[0], 0.5f);
    EXPECT_FLOAT_EQ(x[1], 0.5f);
    EXPECT_EQ(x[2], 0.0f);
    EXPECT_EQ(x[3], 0.0f);
    EXPECT_EQ(x[4], 0.0f);
  }
  {
    std::vector<float> x = {1000.0f, 999.0f, 998.0f};
    softmax(x.data(), 3);
    expect_probabilities(x);
    const double z = 1.0 + std::exp(-1.0) + std::exp(-2.0);
    EXPECT_NEAR(x[0], 1.0 / z, 1e-6);
    EXPECT_NEAR(x[2], std::exp(-2.0) / z, 1e-6);
  }
  {
    std::vector<float> x = {-1e30f, -1e30f + 1e24f};
    softmax(x.data(), 2);
    expect_probabilities(x);
  }
  {
    std::vector<float> x = {-123.0f};
    softmax(x.data(), 1);
    EXPECT_EQ(x[0], 1.0f);
  }
  {
    float x = 5.0f;
    softmax(&x, 0);  // nothing to do, nothing touched
    EXPECT_EQ(x, 5.0f);
  }
}

TEST(Ops, Add) {
  std::vector<float> y = {1.0f, 2.0f, 3.0f, 4.0f, 99.0f};
  const std::vector<float> x = {0.5f, -2.0f, 1e-3f, -4.0f, 1.0f};
  add(y.data(), x.data(), 4);
  EXPECT_EQ(y, (std::vector<float>{1.5f, 0.0f, 3.001f, 0.0f, 99.0f}));
}

// --- rope -------------------------------------------------------------------------------------

std::vector<float> inv_freqs(int head_dim, double base = 10000.0) {
  std::vector<float> f(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    f[i] = static_cast<float>(std::pow(base, -2.0 * i / head_dim));
  }
  return f;
}

// Hand-written: the pairs each style rotates, by angle pos * inv_freq[i].
std::vector<double> rope_reference(const std::vector<float>& x, int n_heads, int head_dim,
                                   int64_t pos, const std::vector<float>& inv_freq,
                                   RopeStyle style) {
  std::vector<double> out(x.begin(), x.end());
  for (int h = 0; h < n_heads; ++h) {
    for (int i = 0; i < head_dim / 2; ++i) {
      const int a = h * head_dim + (style == RopeStyle::kHalf ? i : 2 * i);
      const int b = h * head_dim + (style == RopeStyle::kHalf ? i + head_dim / 2 : 2 * i + 1);
      const double th = static_cast<double>(pos) * inv_freq[i];
      out[a] = x[a] * std::cos(th) - x[b] * std::sin(th);
      out[b] = x[a] * std::sin(th) + x[b] * std::cos(th);
    }
  }
  return out;
}

TEST(Rope, MatchesReferenceForBothStyles) {
  std::mt19937 rng(11);
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
    for (int head_dim : {2, 8, 64}) {
      for (int64_t pos : {1, 7, 100, 4095, 100000}) {
        SCOPED_TRACE(std::string(style == RopeStyle::kHalf ? "half" : "interleaved") +
                     " head_dim=" + std::to_string(head_dim) + " pos=" + std::to_string(pos));
        const int n_heads = 3;
        const auto inv_freq = inv_freqs(head_dim);
        auto x = random_vector(n_heads * head_dim, rng);
        const auto x0 = x;
        rope(x.data(), n_heads, head_dim, pos, inv_freq.data(), style);
        const auto want = rope_reference(x0, n_heads, head_dim, pos, inv_freq, style);
        for (size_t i = 0; i < x.size(); ++i) {
          // Each output mixes two inputs of magnitude <= 1.
          ASSERT_NEAR(x[i], want[i], 2e-6) << "i=" << i;
        }
      }
    }
  }
}

TEST(Rope, RotatesTheRightPairs) {
  const int head_dim = 8, n_heads = 2;
  const auto inv_freq = inv_freqs(head_dim, 100.0);
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
    for (int j = 0; j < head_dim; ++j) {
      SCOPED_TRACE(std::string(style == RopeStyle::kHalf ? "half" : "interleaved") +
                   " unit vector at " + std::to_string(j));
      // A unit vector in head 1 only; it must stay within its pair.
      std::vector<float> x(n_heads * head_dim, 0.0f);
      x[head_dim + j] = 1.0f;
      rope(x.data(), n_heads, head_dim, 3, inv_freq.data(), style);
      const int half = head_dim / 2;
      const int partner = style == RopeStyle::kHalf ? (j < half ? j + half : j - half) : (j ^ 1);
      const int i = style == RopeStyle::kHalf ? j % half : j / 2;
      const double th = 3.0 * inv_freq[i];
      const bool first = style == RopeStyle::kHalf ? j < half : (j % 2 == 0);
      for (int q = 0; q < n_heads * head_dim; ++q) {
        double want = 0.0;
        if (q == head_dim + j) want = std::cos(th);
        if (q == head_dim + partner) want = first ? std::sin(th) : -std::sin(th);
        ASSERT_NEAR(x[q], want, 1e-6) << "q=" << q;
      }
    }
  }
}

TEST(Rope, PositionZeroIsTheIdentity) {
  std::mt19937 rng(12);
  const int head_dim = 16, n_heads = 4;
  const auto inv_freq = inv_freqs(head_dim);
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
    auto x = random_vector(n_heads * head_dim, rng, -100.0f, 100.0f);
    const auto x0 = x;
    rope(x.data(), n_heads, head_dim, 0, inv_freq.data(), style);
    EXPECT_EQ(x, x0);
  }
}

TEST(Rope, StylesDiffer) {
  std::mt19937 rng(13);
  const int head_dim = 8;
  const auto inv_freq = inv_freqs(head_dim);
  auto a = random_vector(head_dim, rng);
  auto b = a;
  rope(a.data(), 1, head_dim, 5, inv_freq.data(), RopeStyle::kHalf);
  rope(b.data(), 1, head_dim, 5, inv_freq.data(), RopeStyle::kInterleaved);
  EXPECT_NE(a, b);
}

// --- attention --------------------------------------------------------------------------------

struct AttnCase {
  int n_heads, n_kv_heads, head_dim;
  int64_t n_ctx;
};

TEST(Attention, PagedMatchesContiguousReference) {
  std::mt19937 rng(21);
  for (AttnCase ac : {AttnCase{4, 2, 8, 13}, AttnCase{6, 2, 12, 1}, AttnCase{2, 1, 16, 4},
                      AttnCase{8, 8, 5, 19}, AttnCase{4, 1, 64, 30}, AttnCase{2, 1, 64, 35},
                      AttnCase{2, 2, 128, 40}, AttnCase{2, 1, 40, 35}}) {
    SCOPED_TRACE("heads=" + std::to_string(ac.n_heads) +
                 " kv_heads=" + std::to_string(ac.n_kv_heads) +
                 " head_dim=" + std::to_string(ac.head_dim) + " n_ctx=" + std::to_string(ac.n_ctx));
    const int block_size = 4;
    const int kv_dim = ac.n_kv_heads * ac.head_dim;
    const int64_t blocks_used = (ac.n_ctx + block_size - 1) / block_size;
    const int64_t num_blocks = blocks_used + 5;
    // Contiguous K/V for the reference.
    const auto k = random_vector(ac.n_ctx * kv_dim, rng, -2.0f, 2.0f);
    const auto v = random_vector(ac.n_ctx * kv_dim, rng);
    // Paged pool: every row not holding a position is NaN, so reading one shows up.
    std::vector<float> kpool(num_blocks * block_size * kv_dim, kNaN);
    std::vector<float> vpool(num_blocks * block_size * kv_dim, kNaN);
    std::vector<int32_t> all(num_blocks);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> table(all.begin(), all.begin() + blocks_used);
    PagedKvLayer layer;
    layer.k = kpool.data();
    layer.v = vpool.data();
    layer.block_size = block_size;
    layer.kv_dim = kv_dim;
    for (int64_t t = 0; t < ac.n_ctx; ++t) {
      float* kr = layer.k_row(table.data(), t);
      float* vr = layer.v_row(table.data(), t);
      ASSERT_EQ(
          kr - kpool.data(),
          (static_cast<int64_t>(table[t / block_size]) * block_size + t % block_size) * kv_dim);
      std::copy_n(&k[t * kv_dim], kv_dim, kr);
      std::copy_n(&v[t * kv_dim], kv_dim, vr);
    }

    const float scale = 1.0f / std::sqrt(static_cast<float>(ac.head_dim));
    const int group = ac.n_heads / ac.n_kv_heads;
    for (int h = 0; h < ac.n_heads; ++h) {
      const int kv_head = h / group;
      const auto q = random_vector(ac.head_dim, rng, -2.0f, 2.0f);
      std::vector<float> out(ac.head_dim + 4, -5.0f);
      attend_head(q.data(), layer, table.data(), ac.n_ctx, kv_head, ac.head_dim, scale, out.data());
      // Grouped with other queries (shorter contexts, as a prefill chunk's earlier tokens have),
      // in every ISA table: each query's result is bitwise its result alone.
      for (const IsaKernels* t : supported_tables()) {
        std::vector<float> alone(ac.head_dim);
        const float* q1 = q.data();
        float* o1 = alone.data();
        t->attend_queries(&q1, &ac.n_ctx, 1, layer, table.data(), kv_head, ac.head_dim, scale, &o1);
        // Up to kMaxAttentionQueries in a group (5-7 run as four and the rest): the query in
        // slot 1 and again in slot 6.
        constexpr int kQ = kMaxAttentionQueries;
        static_assert(kQ == 8);
        const auto q_other = random_vector((kQ - 2) * ac.head_dim, rng, -2.0f, 2.0f);
        std::vector<float> grouped(kQ * ac.head_dim);
        const float* qs[kQ];
        float* outs[kQ];
        int64_t ctx[kQ];
        for (int r = 0, other = 0; r < kQ; ++r) {
          qs[r] = r == 1 || r == 6 ? q.data() : q_other.data() + ac.head_dim * other++;
          outs[r] = grouped.data() + r * ac.head_dim;
          ctx[r] = r == 1 || r == 6 ? ac.n_ctx : std::max<int64_t>(1, ac.n_ctx - 3 * r);
        }
        ctx[2] = 1;
        for (int nq = 2; nq <= kQ; ++nq) {
          t->attend_queries(qs, ctx, nq, layer, table.data(), kv_head, ac.head_dim, scale, outs);
          for (int e = 0; e < ac.head_dim; ++e) {
            ASSERT_EQ(grouped[ac.head_dim + e], alone[e]) << t->name << " nq=" << nq << " e=" << e;
            if (nq > 6) {
              ASSERT_EQ(grouped[6 * ac.head_dim + e], alone[e])
                  << t->name << " slot 6, nq=" << nq << " e=" << e;
            }
          }
        }
        // Grouped with a longer context (a prompt's earlier token beside its later ones: the
        // group reads whole chunks where the query alone reads part of its last one).
        const int64_t shorter = std::max<int64_t>(1, ac.n_ctx - 5);
        t->attend_queries(&q1, &shorter, 1, layer, table.data(), kv_head, ac.head_dim, scale, &o1);
        const int64_t ctx_long[2] = {ac.n_ctx, shorter};
        t->attend_queries(qs, ctx_long, 2, layer, table.data(), kv_head, ac.head_dim, scale, outs);
        for (int e = 0; e < ac.head_dim; ++e)
          ASSERT_EQ(grouped[ac.head_dim + e], alone[e]) << t->name << " shorter, e=" << e;
      }
      // Naive reference in double.
      std::vector<double> s(ac.n_ctx);
      double mx = -1e300;
      for (int64_t t = 0; t < ac.n_ctx; ++t) {
        double d = 0.0;
        for (int e = 0; e < ac.head_dim; ++e) {
          d += static_cast<double>(q[e]) * k[t * kv_dim + kv_head * ac.head_dim + e];
        }
        s[t] = d * scale;
        mx = std::max(mx, s[t]);
      }
      double z = 0.0;
      for (auto& x : s) z += (x = std::exp(x - mx));
      for (int e = 0; e < ac.head_dim; ++e) {
        double want = 0.0, mag = 0.0;
        for (int64_t t = 0; t < ac.n_ctx; ++t) {
          const double term = s[t] / z * v[t * kv_dim + kv_head * ac.head_dim + e];
          want += term;
          mag += std::fabs(term);
        }
        ASSERT_TRUE(close(out[e], want, mag, 1e-5)) << "head " << h << " e=" << e;
      }
      for (int e = ac.head_dim; e < ac.head_dim + 4; ++e) {
        ASSERT_EQ(out[e], -5.0f) << "wrote past out";
      }
    }
  }
}

// A sliding window and soft-capped scores (Gemma 2, Mistral): in every table, a query reads only
// its last `window` positions (every row before them is NaN here, so reading one shows), scores
// pass through cap * tanh(s / cap), and grouping with queries of other windows changes nothing.
TEST(Attention, WindowAndSoftCapMatchTheReferenceInEveryTable) {
  std::mt19937 rng(23);
  const int head_dim = 16, block_size = 4;
  const int64_t n_ctx = 41, window = 7, blocks = (n_ctx + block_size - 1) / block_size;
  const float scale = 0.3f, cap = 1.5f;
  const auto k = random_vector(n_ctx * head_dim, rng, -2.0f, 2.0f);
  const auto v = random_vector(n_ctx * head_dim, rng);
  std::vector<float> kpool(blocks * block_size * head_dim), vpool(kpool.size());
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  PagedKvLayer layer;
  layer.k = kpool.data();
  layer.v = vpool.data();
  layer.block_size = block_size;
  layer.kv_dim = head_dim;
  for (int64_t t = 0; t < n_ctx; ++t) {
    const bool outside = t < n_ctx - window;
    for (int e = 0; e < head_dim; ++e) {
      layer.k_row(table.data(), t)[e] = outside ? kNaN : k[t * head_dim + e];
      layer.v_row(table.data(), t)[e] = outside ? kNaN : v[t * head_dim + e];
    }
  }
  const auto q = random_vector(head_dim, rng, -2.0f, 2.0f);
  // Reference in double over the window.
  std::vector<double> s(n_ctx, 0.0), want(head_dim, 0.0);
  double mx = -1e300, z = 0.0;
  for (int64_t t = n_ctx - window; t < n_ctx; ++t) {
    double d = 0.0;
    for (int e = 0; e < head_dim; ++e) d += static_cast<double>(q[e]) * k[t * head_dim + e];
    s[t] = cap * std::tanh(d * scale / cap);
    mx = std::max(mx, s[t]);
  }
  for (int64_t t = n_ctx - window; t < n_ctx; ++t) z += (s[t] = std::exp(s[t] - mx));
  for (int64_t t = n_ctx - window; t < n_ctx; ++t)
    for (int e = 0; e < head_dim; ++e) want[e] += s[t] / z * v[t * head_dim + e];
  AttentionOpts opts(scale);
  opts.window = window;
  opts.softcap = cap;
  for (const IsaKernels* t : supported_tables()) {
    SCOPED_TRACE(t->name);
    std::vector<float> alone(head_dim), grouped(3 * head_dim);
    const float* q1 = q.data();
    float* o1 = alone.data();
    t->attend_queries(&q1, &n_ctx, 1, layer, table.data(), 0, head_dim, opts, &o1);
    for (int e = 0; e < head_dim; ++e) ASSERT_NEAR(alone[e], want[e], 1e-5) << e;
    // With queries at earlier positions (their windows reach further back, into the NaN rows).
    const float* qs[3] = {q.data(), q.data(), q.data()};
    float* outs[3] = {grouped.data() + head_dim, grouped.data(), grouped.data() + 2 * head_dim};
    const int64_t ctx[3] = {n_ctx - 20, n_ctx, n_ctx - 9};
    t->attend_queries(qs, ctx, 3, layer, table.data(), 0, head_dim, opts, outs);
    for (int e = 0; e < head_dim; ++e) ASSERT_EQ(grouped[e], alone[e]) << e;
  }
}

// Query q in slot 1 of a group of nq (at most kMaxAttentionQueries), with context n_ctx; the
// other slots hold q2 with contexts n_ctx - 1 - r % 3 (every query takes the whole first chunk),
// slot 7 n_ctx as well where last_full. Returns slot 1's output.
std::vector<float> attend_in_group(const IsaKernels* t, const float* q, const float* q2,
                                   int64_t n_ctx, bool last_full, int nq, const PagedKvLayer& layer,
                                   const int32_t* table, int kv_head, int head_dim, float scale) {
  std::vector<float> outs_data(kMaxAttentionQueries * head_dim);
  const float* qs[kMaxAttentionQueries];
  float* outs[kMaxAttentionQueries];
  int64_t ctx[kMaxAttentionQueries];
  for (int r = 0; r < kMaxAttentionQueries; ++r) {
    qs[r] = r == 1 ? q : q2;
    outs[r] = outs_data.data() + r * head_dim;
    ctx[r] = r == 1 || (r == 7 && last_full) ? n_ctx : n_ctx - 1 - r % 3;
  }
  t->attend_queries(qs, ctx, nq, layer, table, kv_head, head_dim, scale, outs);
  return {outs_data.begin() + head_dim, outs_data.begin() + 2 * head_dim};
}

TEST(Attention, Bf16AndF16CachesMatchTheRoundedReferenceAndStayGroupInvariant) {
  std::mt19937 rng(77);
  const int block_size = 4, head_dim = 40, kv_dim = 2 * head_dim;  // 40: a vector tail
  const int64_t n_ctx = 23, blocks = (n_ctx + block_size - 1) / block_size;
  for (KvType type : {KvType::kBF16, KvType::kF16}) {
    const auto k = random_vector(n_ctx * kv_dim, rng, -2.0f, 2.0f);
    const auto v = random_vector(n_ctx * kv_dim, rng);
    std::vector<uint16_t> kpool(blocks * block_size * kv_dim), vpool(kpool.size());
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    std::reverse(table.begin(), table.end());
    PagedKvLayer layer{kpool.data(), vpool.data(), block_size, kv_dim, type};
    std::vector<float> kr(k.size()), vr(v.size());  // the values as stored
    for (int64_t t = 0; t < n_ctx; ++t) {
      for (int e = 0; e < kv_dim; ++e) {
        const uint16_t kb =
            type == KvType::kBF16 ? f32_to_bf16(k[t * kv_dim + e]) : f32_to_f16(k[t * kv_dim + e]);
        const uint16_t vb =
            type == KvType::kBF16 ? f32_to_bf16(v[t * kv_dim + e]) : f32_to_f16(v[t * kv_dim + e]);
        layer.k_at<uint16_t>(table.data(), t)[e] = kb;
        layer.v_at<uint16_t>(table.data(), t)[e] = vb;
        kr[t * kv_dim + e] = type == KvType::kBF16 ? bf16_to_f32(kb) : f16_to_f32(kb);
        vr[t * kv_dim + e] = type == KvType::kBF16 ? bf16_to_f32(vb) : f16_to_f32(vb);
      }
    }
    const auto q = random_vector(head_dim, rng, -2.0f, 2.0f);
    for (const IsaKernels* t : supported_tables()) {
      SCOPED_TRACE(std::string(t->name) + (type == KvType::kBF16 ? " bf16" : " f16"));
      std::vector<float> out(head_dim);
      const float* q1 = q.data();
      float* o1 = out.data();
      const float scale = 0.25f;
      t->attend_queries(&q1, &n_ctx, 1, layer, table.data(), 1, head_dim, scale, &o1);
      std::vector<double> s(n_ctx);
      double mx = -1e300, z = 0.0;
      for (int64_t p = 0; p < n_ctx; ++p) {
        double d = 0.0;
        for (int e = 0; e < head_dim; ++e)
          d += q[e] * static_cast<double>(kr[p * kv_dim + head_dim + e]);
        mx = std::max(mx, s[p] = d * scale);
      }
      for (auto& x : s) z += (x = std::exp(x - mx));
      for (int e = 0; e < head_dim; ++e) {
        double want = 0.0, mag = 0.0;
        for (int64_t p = 0; p < n_ctx; ++p) {
          want += s[p] / z * vr[p * kv_dim + head_dim + e];
          mag += std::fabs(s[p] / z * vr[p * kv_dim + head_dim + e]);
        }
        ASSERT_TRUE(close(out[e], want, mag, 1e-5)) << "e=" << e;
      }
      // Grouped with another query, and in a whole GQA group of eight (the others' contexts
      // shorter, one as long): bitwise the same.
      const auto q2 = random_vector(head_dim, rng);
      for (int nq : {2, kMaxAttentionQueries}) {
        const auto o_again = attend_in_group(t, q.data(), q2.data(), n_ctx, true, nq, layer,
                                             table.data(), 1, head_dim, scale);
        for (int e = 0; e < head_dim; ++e) ASSERT_EQ(o_again[e], out[e]) << "nq=" << nq;
      }
    }
  }
}

TEST(Attention, Q8CachesMatchTheDequantizedReferenceAndStayGroupInvariant) {
  // A q8_0 cache laid out as KvCache lays it: per block, K's int8 rows, V's, then K's f16 scales
  // (one per row and head) and V's; the blocks out of order. Every table reads it as the f32
  // cache of the dequantized values would be read.
  std::mt19937 rng(78);
  const int block_size = 4, head_dim = 40, kv_dim = 2 * head_dim, heads = 2;
  const int64_t n_ctx = 37, blocks = (n_ctx + block_size - 1) / block_size;
  const int64_t block_bytes = 2 * block_size * kv_dim + 2 * block_size * heads * 2;
  std::vector<uint8_t> pool(blocks * block_bytes + 64);
  uint8_t* base = pool.data() + (64 - reinterpret_cast<uintptr_t>(pool.data()) % 64) % 64;
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  PagedKvLayer layer{base, base + block_size * kv_dim, block_size, kv_dim, KvType::kQ8_0};
  layer.block_stride = block_bytes;
  layer.scale_group = head_dim;
  layer.scale_offset = 2 * block_size * kv_dim;
  std::vector<float> kr(n_ctx * kv_dim), vr(n_ctx * kv_dim);  // the values as stored
  for (int64_t t = 0; t < n_ctx; ++t) {
    for (int which = 0; which < 2; ++which) {
      const auto x =
          random_vector(kv_dim, rng, which == 0 ? -3.0f : -1.0f, which == 0 ? 3.0f : 1.0f);
      int8_t* q =
          which == 0 ? layer.k_at<int8_t>(table.data(), t) : layer.v_at<int8_t>(table.data(), t);
      uint16_t* sc = which == 0 ? layer.k_scales(table.data(), t) : layer.v_scales(table.data(), t);
      float* stored = (which == 0 ? kr.data() : vr.data()) + t * kv_dim;
      for (int h = 0; h < heads; ++h) {
        float amax = 0.0f;
        for (int e = 0; e < head_dim; ++e) amax = std::max(amax, std::fabs(x[h * head_dim + e]));
        sc[h] = f32_to_f16(amax / 127.0f);
        const float d = f16_to_f32(sc[h]);
        for (int e = 0; e < head_dim; ++e) {
          const int i = h * head_dim + e;
          q[i] = static_cast<int8_t>(std::clamp(std::lround(x[i] / d), -127L, 127L));
          stored[i] = d * q[i];
        }
      }
    }
  }
  const auto q = random_vector(head_dim, rng, -2.0f, 2.0f);
  // What the AVX-512 VNNI tables score with (int8_attention_scores): the query quantized as a
  // row of the cache is, with an f32 scale (max|q| / 127, round half to even).
  std::vector<float> q_int8(head_dim);
  {
    float amax = 0.0f;
    for (float x : q) amax = std::max(amax, std::fabs(x));
    const float d = amax / 127.0f, inv = 1.0f / d;
    for (int e = 0; e < head_dim; ++e)
      q_int8[e] = d * std::clamp(std::nearbyint(q[e] * inv), -127.0f, 127.0f);
  }
  const float scale = 0.25f;
  for (int kv_head = 0; kv_head < heads; ++kv_head) {
    for (const IsaKernels* t : supported_tables()) {
      const std::vector<float>& qr = t->int8_attention_scores ? q_int8 : q;
      std::vector<double> s(n_ctx), want(head_dim, 0.0), mag(head_dim, 0.0);
      double mx = -1e300, z = 0.0;
      for (int64_t p = 0; p < n_ctx; ++p) {
        double d = 0.0;
        for (int e = 0; e < head_dim; ++e)
          d += qr[e] * static_cast<double>(kr[p * kv_dim + kv_head * head_dim + e]);
        mx = std::max(mx, s[p] = d * scale);
      }
      for (auto& x : s) z += (x = std::exp(x - mx));
      for (int e = 0; e < head_dim; ++e)
        for (int64_t p = 0; p < n_ctx; ++p) {
          want[e] += s[p] / z * vr[p * kv_dim + kv_head * head_dim + e];
          mag[e] += std::fabs(s[p] / z * vr[p * kv_dim + kv_head * head_dim + e]);
        }
      {
        SCOPED_TRACE(std::string(t->name) + " head " + std::to_string(kv_head));
        std::vector<float> out(head_dim);
        const float* q1 = q.data();
        float* o1 = out.data();
        t->attend_queries(&q1, &n_ctx, 1, layer, table.data(), kv_head, head_dim, scale, &o1);
        for (int e = 0; e < head_dim; ++e)
          ASSERT_TRUE(close(out[e], want[e], mag[e], 1e-5)) << "e=" << e;
        // Grouped with other queries (three, and a whole GQA group of eight): bitwise the same.
        const auto q2 = random_vector(head_dim, rng);
        for (int nq : {3, kMaxAttentionQueries}) {
          const auto o_again = attend_in_group(t, q.data(), q2.data(), n_ctx, false, nq, layer,
                                               table.data(), kv_head, head_dim, scale);
          for (int e = 0; e < head_dim; ++e) ASSERT_EQ(o_again[e], out[e]) << "nq=" << nq;
        }
      }
    }
  }
}

TEST(Attention, GqaUsesTheGivenKvHead) {
  // Two KV heads with different constant values: the output is exactly that head's value.
  const int head_dim = 4, kv_dim = 8, block_size = 4;
  std::vector<float> k(3 * block_size * kv_dim, 0.0f), v(3 * block_size * kv_dim, 0.0f);
  PagedKvLayer layer{k.data(), v.data(), block_size, kv_dim};
  const std::vector<int32_t> table = {2, 0};
  for (int64_t t = 0; t < 6; ++t) {
    float* vr = layer.v_row(table.data(), t);
    std::fill(vr, vr + head_dim, 1.0f);
    std::fill(vr + head_dim, vr + kv_dim, 7.0f);
  }
  const std::vector<float> q(head_dim, 0.3f);
  std::vector<float> out(head_dim);
  attend_head(q.data(), layer, table.data(), 6, 0, head_dim, 0.5f, out.data());
  for (float o : out) EXPECT_NEAR(o, 1.0f, 1e-6);
  attend_head(q.data(), layer, table.data(), 6, 1, head_dim, 0.5f, out.data());
  for (float o : out) EXPECT_NEAR(o, 7.0f, 1e-5);
}

}  // namespace
}  // namespace tf::kernels
