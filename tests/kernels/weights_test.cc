// The weight dtypes: quantization round trips within their error bounds, and the matmul of every
// ISA table over every dtype equals a double-precision reference over the dequantized weights,
// for odd sizes; and results are bitwise independent of the batch around a row and of threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/ggml_quants.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/q8.h"
#include "kernels/weights.h"

// Skips an AMX test where the CPU (or Linux) gives no matrix tiles, except under
// `scripts/test.sh amx` (TF_REQUIRE_AMX), where every AMX test must run and this fails instead.
#define SKIP_WITHOUT_AMX()                                                                 \
  do {                                                                                     \
    if (std::getenv("TF_REQUIRE_AMX") != nullptr)                                          \
      FAIL() << "TF_REQUIRE_AMX is set, but no kernel table with matrix tiles runs here (" \
             << cpu_features().to_string() << ")";                                         \
    GTEST_SKIP() << "no matrix tiles (AMX) on this CPU";                                   \
  } while (0)

namespace tf::kernels {
namespace {

const WeightType kTypes[] = {WeightType::kF32,       WeightType::kBF16,      WeightType::kF16,
                             WeightType::kI8,        WeightType::kQ4,        WeightType::kF32Panels,
                             WeightType::kF16Panels, WeightType::kBF16Panels};

std::vector<float> random_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A packed matrix that owns its bytes.
struct Packed {
  std::vector<uint8_t> data, scales;
  WeightMatrix m;
  Packed(WeightType t, const std::vector<float>& w, int64_t n, int64_t k) {
    if (t == WeightType::kF32Panels) {  // the f32 GEMM's layout (pack_f32_panels)
      data.resize(static_cast<size_t>(n * k) * 4 + 64, 0xAB);
      m = pack_f32_panels(w.data(), n, k, reinterpret_cast<float*>(data.data()));
      return;
    }
    if (t == WeightType::kF16Panels || t == WeightType::kBF16Panels) {  // rounded, then laid out
      const WeightType half = t == WeightType::kF16Panels ? WeightType::kF16 : WeightType::kBF16;
      std::vector<uint8_t> rows;
      quantize_rows(half, w.data(), n, k, rows, scales);
      data.resize(rows.size() + 64, 0xAB);
      m = pack_half_panels(half, reinterpret_cast<const uint16_t*>(rows.data()), n, k,
                           reinterpret_cast<uint16_t*>(data.data()));
      return;
    }
    quantize_rows(t, w.data(), n, k, data, scales);
    data.resize(data.size() + 64, 0xAB);  // reading past the end shows in the results
    m = {t, data.data(), scales.empty() ? nullptr : scales.data(), n, k};
  }
};

std::vector<int64_t> ks_for(WeightType t) {
  if (t == WeightType::kQ4) return {32, 64, 96, 160};
  return {1, 3, 7, 16, 17, 33, 64, 100};
}

// For every output (i, j): the reference bias[j] + sum over k of act(i, q) * w[j][q] in double,
// its magnitude (sum of |products|) and the bound on how far the activations' rounding moves it
// (sum of round(i, q) * |w[j][q]|), handed to check(i, j, want, mag, rounding).
template <class Act, class Round, class Check>
void for_each_reference(const WeightMatrix& w, int64_t m, int64_t n, int64_t k, const float* bias,
                        Act act, Round round, Check check) {
  std::vector<float> row(k);
  for (int64_t j = 0; j < n; ++j) {
    w.dequantize_row(j, row.data());
    for (int64_t i = 0; i < m; ++i) {
      double want = bias[j], mag = std::fabs(bias[j]), rounding = 0.0;
      for (int64_t q = 0; q < k; ++q) {
        const double a = act(i, q);
        want += a * row[q];
        mag += std::fabs(a * row[q]);
        rounding += round(i, q) * std::fabs(row[q]);
      }
      check(i, j, want, mag, rounding);
    }
  }
}

TEST(Weights, QuantizationErrorIsWithinTheTypesBound) {
  std::mt19937 rng(5);
  const int64_t n = 7, k = 96;
  const auto w = random_vector(n * k, rng);
  for (WeightType t : kTypes) {
    Packed p(t, w, n, k);
    EXPECT_EQ(p.m.bytes(), static_cast<int64_t>(p.data.size() - 64 + p.scales.size()));
    std::vector<float> row(k);
    for (int64_t r = 0; r < n; ++r) {
      p.m.dequantize_row(r, row.data());
      float amax = 0.0f;
      for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(w[r * k + i]));
      for (int64_t i = 0; i < k; ++i) {
        const float x = w[r * k + i], err = std::fabs(row[i] - x);
        switch (t) {
          case WeightType::kF32:
          case WeightType::kF32Panels:
            ASSERT_EQ(row[i], x);
            break;
          case WeightType::kBF16:
          case WeightType::kBF16Panels:
            ASSERT_LE(err, std::fabs(x) * 0x1p-8f) << i;
            break;
          case WeightType::kF16:
          case WeightType::kF16Panels:
            ASSERT_LE(err, std::fabs(x) * 0x1p-11f + 1e-7f) << i;
            break;
          case WeightType::kI8:
            ASSERT_LE(err, amax / 127.0f * 0.5001f) << i;
            break;
          case WeightType::kQ4: {
            float gmax = 0.0f;
            const int64_t g0 = i / 32 * 32;
            for (int64_t q = g0; q < g0 + 32; ++q) gmax = std::max(gmax, std::fabs(w[r * k + q]));
            // Half a step of max/8, or a whole one for the clamped end (as Q4_0).
            ASSERT_LE(err, gmax / 8.0f * 1.001f + 1e-6f) << i;
            break;
          }
          default:
            FAIL() << "not a packing type";
        }
      }
    }
  }
  std::vector<uint8_t> d, sc;
  EXPECT_THROW(quantize_rows(WeightType::kQ4, w.data(), 1, 33, d, sc), Error);
  EXPECT_THROW(parse_weight_type("fp8"), Error);
  EXPECT_EQ(parse_weight_type("int8"), WeightType::kI8);
}

TEST(Weights, MatmulOfEveryTypeAndIsaMatchesTheDequantizedReference) {
  std::mt19937 rng(17);
  for (WeightType t : kTypes) {
    for (const IsaKernels* isa : supported_tables()) {
      for (int64_t k : ks_for(t)) {
        for (int64_t m : {1, 3, 17}) {
          const int64_t n = 9;
          SCOPED_TRACE(std::string(weight_type_name(t)) + " " + isa->name +
                       " m=" + std::to_string(m) + " k=" + std::to_string(k));
          const auto w = random_vector(n * k, rng);
          const auto x = random_vector(m * k, rng);
          const auto bias = random_vector(n, rng);
          Packed p(t, w, n, k);
          std::vector<float> y(m * n, std::numeric_limits<float>::quiet_NaN());
          isa->matmul_cols(x.data(), m, k, p.m, 0, n, bias.data(), y.data(), n, false);
          std::vector<float> row(k);
          for (int64_t j = 0; j < n; ++j) {
            p.m.dequantize_row(j, row.data());
            for (int64_t i = 0; i < m; ++i) {
              double want = bias[j], mag = std::fabs(bias[j]);
              for (int64_t q = 0; q < k; ++q) {
                want += static_cast<double>(x[i * k + q]) * row[q];
                mag += std::fabs(static_cast<double>(x[i * k + q]) * row[q]);
              }
              ASSERT_NEAR(y[i * n + j], want, 2e-6 * mag + 1e-6) << "y[" << i << "," << j << "]";
            }
          }
        }
      }
    }
  }
}

TEST(Weights, ARowsResultDoesNotDependOnTheBatchOrTheThreads) {
  std::mt19937 rng(3);
  ThreadPool one(1), two(2);
  // k = 128 takes the int8 dot-product path for int8 and q4 where the CPU has VNNI; 96 does not.
  for (int64_t k : {96, 128})
    for (WeightType t : kTypes) {
      const int64_t n = 37, m = 21;
      const auto w = random_vector(n * k, rng);
      const auto x = random_vector(m * k, rng);
      Packed p(t, w, n, k);
      std::vector<float> all(m * n), all2(m * n), alone(n);
      matmul(x.data(), m, p.m, nullptr, all.data(), one);
      matmul(x.data(), m, p.m, nullptr, all2.data(), two);
      for (int64_t i = 0; i < m; ++i) {
        matmul(x.data() + i * k, 1, p.m, nullptr, alone.data(), two);
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(alone[j], all[i * n + j])
              << weight_type_name(t) << " row " << i << " col " << j;
          ASSERT_EQ(all2[i * n + j], all[i * n + j]) << weight_type_name(t);
        }
      }
      // A sub-matrix of rows reads the same weights (panels: whole ones, up to a short last one).
      const bool panels = is_any_panel_type(t);
      const int64_t r0 = panels ? 16 : 5, rc = panels ? n - 16 : 10;
      const WeightMatrix tail = p.m.rows(r0, rc);
      std::vector<float> part(m * rc);
      matmul(x.data(), m, tail, nullptr, part.data(), two);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < rc; ++j) ASSERT_EQ(part[i * rc + j], all[i * n + r0 + j]);
    }
}

// Batches are computed in cache blocks (64 activation rows x a few dozen weight rows, k in parts
// of 512 when it is over 1024) with vector sums carried between the parts: every output must be
// the bits of the same row computed alone (one pass over k), and near the reference. m = 70 and
// n = 53 leave partial blocks and partial tiles on both sides; k = 2080 is four parts and a tail.
TEST(Weights, CacheBlockedBatchesEqualEachRowAlone) {
  std::mt19937 rng(23);
  for (const IsaKernels* isa : supported_tables()) {
    for (WeightType t : kTypes) {
      for (int64_t k : {int64_t{1000}, int64_t{2080}, int64_t{2061}}) {
        if (t == WeightType::kQ4 && k % 32 != 0) continue;
        const int64_t m = 70, n = 53;
        SCOPED_TRACE(std::string(weight_type_name(t)) + " " + isa->name +
                     " k=" + std::to_string(k));
        const auto w = random_vector(n * k, rng);
        const auto x = random_vector(m * k, rng);
        const auto bias = random_vector(n, rng);
        const auto y0 = random_vector(m * n, rng);
        Packed p(t, w, n, k);
        std::vector<float> all = y0, alone(n);
        isa->matmul_cols(x.data(), m, k, p.m, 0, n, bias.data(), all.data(), n, true);
        std::vector<float> row(k);
        for (int64_t i = 0; i < m; ++i) {
          std::copy(y0.begin() + i * n, y0.begin() + (i + 1) * n, alone.begin());
          isa->matmul_cols(x.data() + i * k, 1, k, p.m, 0, n, bias.data(), alone.data(), n, true);
          for (int64_t j = 0; j < n; ++j) ASSERT_EQ(all[i * n + j], alone[j]) << i << "," << j;
        }
        for (int64_t j = 0; j < n; j += 13) {
          p.m.dequantize_row(j, row.data());
          for (int64_t i = 0; i < m; i += 11) {
            double want = y0[i * n + j] + bias[j], mag = std::fabs(want);
            for (int64_t q = 0; q < k; ++q) {
              want += static_cast<double>(x[i * k + q]) * row[q];
              mag += std::fabs(static_cast<double>(x[i * k + q]) * row[q]);
            }
            ASSERT_NEAR(all[i * n + j], want, 2e-6 * mag + 1e-6) << i << "," << j;
          }
        }
      }
    }
  }
}

// f32-panels: panel P of R rows holds element (16P + r, c) at 16P * k + c * R + r, packed alike
// from rows or from their transpose (GPT-2's Conv1D), and gives the rows back.
TEST(Weights, F32PanelsAreTheRowsColumnByColumn) {
  std::mt19937 rng(53);
  const int64_t n = 37, k = 11;  // two whole panels and one of 5 rows
  const auto w = random_vector(n * k, rng);
  std::vector<float> wt(n * k), a(n * k), b(n * k), row(k);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) wt[c * n + r] = w[r * k + c];
  const WeightMatrix pa = pack_f32_panels(w.data(), n, k, a.data());
  pack_f32_panels(wt.data(), n, k, b.data(), /*transposed=*/true);
  EXPECT_EQ(a, b);
  EXPECT_EQ(pa.type, WeightType::kF32Panels);
  EXPECT_EQ(pa.bytes(), n * k * 4);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t first = r / 16 * 16, rows = std::min<int64_t>(16, n - first);
    for (int64_t c = 0; c < k; ++c)
      ASSERT_EQ(a[first * k + c * rows + r - first], w[r * k + c]) << r << "," << c;
    pa.dequantize_row(r, row.data());
    ASSERT_TRUE(std::equal(row.begin(), row.end(), w.begin() + r * k)) << r;
  }
  EXPECT_EQ(pa.rows(32, 5).n, 5);
  EXPECT_THROW(pa.rows(8, 16), Error);  // not whole panels
}

TEST(Weights, ManyMatricesInOneDispatchEqualSeparateCalls) {
  std::mt19937 rng(41);
  ThreadPool two(2);
  for (int64_t k : {96, 128}) {
    for (WeightType t : kTypes) {
      const int64_t m = 5, ns[3] = {13, 4, 7};
      const auto x = random_vector(m * k, rng);
      std::vector<Packed> ps;
      std::vector<std::vector<float>> bias, apart(3), together(3);
      std::vector<MatmulOutput> outs;
      for (int i = 0; i < 3; ++i) {
        ps.emplace_back(t, random_vector(ns[i] * k, rng), ns[i], k);
        bias.push_back(random_vector(ns[i], rng));
        apart[i].resize(m * ns[i]);
        together[i].resize(m * ns[i]);
      }
      for (int i = 0; i < 3; ++i) {
        matmul(x.data(), m, ps[i].m, bias[i].data(), apart[i].data(), two);
        outs.push_back({ps[i].m, i == 1 ? nullptr : bias[i].data(), together[i].data()});
      }
      matmul(x.data(), m, ps[1].m, nullptr, apart[1].data(), two);
      matmul_many(x.data(), m, outs, two);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(together[i], apart[i]) << weight_type_name(t) << i;
    }
  }
}

// The residual add fused into the epilogue: bit for bit a matmul into scratch and a separate add
// (y + s with s the finished dot product plus bias), for every dtype and path (f32, bf16 and int8
// dot products), at M = 1 (row-by-row decode) and M = 6 (tiles).
TEST(Weights, FusedResidualAddEqualsMatmulThenAdd) {
  std::mt19937 rng(43);
  ThreadPool two(2);
  for (int64_t k : {96, 128}) {
    for (WeightType t : kTypes) {
      for (int64_t m : {1, 6}) {
        const int64_t n = 19;
        const auto x = random_vector(m * k, rng);
        const Packed p(t, random_vector(n * k, rng), n, k);
        const auto bias = random_vector(n, rng);
        const auto residual = random_vector(m * n, rng);
        std::vector<float> scratch(m * n), expect = residual, fused = residual;
        matmul(x.data(), m, p.m, bias.data(), scratch.data(), two);
        for (int64_t i = 0; i < m * n; ++i) expect[i] = expect[i] + scratch[i];
        matmul_add(x.data(), m, p.m, bias.data(), fused.data(), two);
        EXPECT_EQ(fused, expect) << weight_type_name(t) << " k=" << k << " m=" << m;
        EXPECT_NE(fused, scratch);  // the residual was really added
      }
    }
  }
}

// Every table with bf16 dot products (vdpbf16ps) on row-major bf16 activations, with and
// without the fused residual add.
TEST(Weights, Bf16DotProductsMatchTheRoundedReference) {
  std::vector<const IsaKernels*> tables;
  for (const IsaKernels* t : supported_tables())
    if (t->matmul_cols_bf16 != nullptr) tables.push_back(t);
  if (tables.empty()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::mt19937 rng(31);
  for (const IsaKernels* table : tables)
    for (int64_t k : {1, 7, 32, 33, 64, 100})
      for (int64_t m : {1, 3, 17})
        for (int64_t n : {9, 40}) {  // 40: the one-row and few-row tiles that fetch ahead
          SCOPED_TRACE(std::string(table->name) + " m=" + std::to_string(m) +
                       " k=" + std::to_string(k) + " n=" + std::to_string(n));
          const auto w = random_vector(n * k, rng);
          const auto x = random_vector(m * k, rng);
          const auto bias = random_vector(n, rng);
          const auto residual = random_vector(m * n, rng);
          Packed p(WeightType::kBF16, w, n, k);
          std::vector<uint16_t> xb(m * k);
          for (int64_t i = 0; i < m * k; ++i) xb[i] = f32_to_bf16(x[i]);
          std::vector<float> y(m * n), acc = residual;
          table->matmul_cols_bf16(xb.data(), m, k, p.m, 0, n, bias.data(), y.data(), n, false);
          table->matmul_cols_bf16(xb.data(), m, k, p.m, 0, n, bias.data(), acc.data(), n, true);
          for_each_reference(
              p.m, m, n, k, bias.data(),
              [&](int64_t i, int64_t q) { return static_cast<double>(bf16_to_f32(xb[i * k + q])); },
              [&](int64_t i, int64_t q) { return std::fabs(x[i * k + q] * 0x1p-8); },
              [&](int64_t i, int64_t j, double want, double mag, double rounding) {
                ASSERT_NEAR(y[i * n + j], want, 2e-6 * mag + 1e-6) << "y[" << i << "," << j << "]";
                std::vector<float> row(k);
                p.m.dequantize_row(j, row.data());
                double exact = bias[j];
                for (int64_t q = 0; q < k; ++q) exact += static_cast<double>(x[i * k + q]) * row[q];
                ASSERT_NEAR(y[i * n + j], exact, rounding + 2e-6 * mag + 1e-6);
                ASSERT_EQ(acc[i * n + j], residual[i * n + j] + y[i * n + j]);
              });
          // A row's result does not depend on its batch: each row alone gives the same bits.
          std::vector<float> alone(n);
          for (int64_t i = 0; i < m; ++i) {
            table->matmul_cols_bf16(xb.data() + i * k, 1, k, p.m, 0, n, bias.data(), alone.data(),
                                    n, false);
            for (int64_t j = 0; j < n; ++j) ASSERT_EQ(alone[j], y[i * n + j]) << i << "," << j;
          }
        }
}

// Q8_0's rule for one block of 32 activations, written out here (scale max|x| / 127, quants
// rounded half away from zero): the values the int8 tiles multiply.
void q8_reference_block(const float* x, double* out, double* half_step) {
  float amax = 0.0f;
  for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(x[e]));
  const float d = amax / 127.0f;
  for (int e = 0; e < 32; ++e) {
    const float v = d > 0.0f ? x[e] * (1.0f / d) : 0.0f;
    out[e] = d * std::clamp(std::trunc(v + (v < 0.0f ? -0.5f : 0.5f)), -127.0f, 127.0f);
  }
  *half_step = d / 2.0;
}

// The matrix tile kernels (AMX) of every table that has them, for each weight type they take, in
// their own activation layout: near the reference of the rounded / quantized activations and the
// dequantized weights, near the exact product within the activations' rounding, the fused
// residual add the same float addition, and each row's bits the same alone as in a batch and
// for any split of the columns at the tiles' granule. n, k and m past whole tiles.
TEST(Weights, TileKernelsMatchTheReference) {
  std::vector<const IsaKernels*> tables;
  for (const IsaKernels* t : supported_tables())
    if (t->tiles != nullptr) tables.push_back(t);
  if (tables.empty()) SKIP_WITHOUT_AMX();
  std::mt19937 rng(37);
  for (const IsaKernels* table : tables) {
    const TileKernels& tiles = *table->tiles;
    // The quantized types take the tiles as panels (PanelKernelsMatchTheReference).
    EXPECT_FALSE(tiles.takes(WeightType::kQ8_0, 64));
    for (WeightType t : {WeightType::kBF16}) {
      const bool bf16 = t == WeightType::kBF16;
      EXPECT_TRUE(tiles.takes(t, 64)) << weight_type_name(t);
      for (int64_t k :
           bf16 ? std::vector<int64_t>{1, 33, 100, 128} : std::vector<int64_t>{32, 96, 256})
        for (int64_t m : {1, 3, 17, 40})
          for (int64_t n : {9, 37}) {
            SCOPED_TRACE(std::string(table->name) + " " + std::string(weight_type_name(t)) + " m=" +
                         std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
            const auto w = random_vector(n * k, rng);
            auto x = random_vector(m * k, rng);
            x[std::min<int64_t>(5, m * k - 1)] = 40.0f;  // an outlier block
            const auto bias = random_vector(n, rng);
            const auto residual = random_vector(m * n, rng);
            std::vector<uint8_t> bytes(WeightMatrix::row_bytes(t, k) * n + 64, 0xAB);
            Packed p(t == WeightType::kQ8_0 ? WeightType::kI8 : t, w, n, k);
            if (t == WeightType::kQ8_0) {
              quantize_blocks(t, w.data(), n * k, bytes.data());
              p.m = {t, bytes.data(), nullptr, n, k};
            }
            // Activations packed in two ranges of rows (as matmul's threads do), over a buffer
            // of garbage.
            auto run = [&](const float* xs, int64_t rows, const float* r, std::vector<float>& y,
                           bool accumulate, int64_t split) {
              std::vector<uint8_t> packed(tiles.packed_bytes(t, rows, k), 0xEE);
              tiles.pack_rows(t, xs, rows, k, 0, rows / 2, packed.data());
              tiles.pack_rows(t, xs, rows, k, rows / 2, rows, packed.data());
              y.assign(r, r + rows * n);
              tiles.matmul_cols(packed.data(), rows, k, p.m, 0, split, bias.data(), y.data(), n,
                                accumulate);
              tiles.matmul_cols(packed.data(), rows, k, p.m, split, n, bias.data(), y.data(), n,
                                accumulate);
            };
            std::vector<float> y, acc;
            run(x.data(), m, residual.data(), y, false, std::min<int64_t>(n, tiles.col_granule));
            run(x.data(), m, residual.data(), acc, true, n);
            std::vector<float> row(k), xr(k);
            for (int64_t i = 0; i < m; ++i) {
              double rounding = 0.0;  // per element, the activation's rounding bound
              std::vector<double> half(k);
              for (int64_t b = 0; b * 32 < k; ++b) {
                if (bf16) {
                  for (int64_t q = b * 32; q < std::min(k, b * 32 + 32); ++q) {
                    xr[q] = bf16_to_f32(f32_to_bf16(x[i * k + q]));
                    half[q] = std::fabs(x[i * k + q]) * 0x1p-8;
                  }
                } else {
                  double v[32], h = 0.0;
                  q8_reference_block(x.data() + i * k + b * 32, v, &h);
                  for (int e = 0; e < 32; ++e) {
                    xr[b * 32 + e] = static_cast<float>(v[e]);
                    half[b * 32 + e] = h;
                  }
                }
              }
              std::vector<float> alone;
              run(x.data() + i * k, 1, residual.data(), alone, false, n);
              for (int64_t j = 0; j < n; ++j) {
                p.m.dequantize_row(j, row.data());
                double want = bias[j], exact = bias[j], mag = std::fabs(bias[j]);
                rounding = 0.0;
                for (int64_t q = 0; q < k; ++q) {
                  want += static_cast<double>(xr[q]) * row[q];
                  exact += static_cast<double>(x[i * k + q]) * row[q];
                  mag += std::fabs(static_cast<double>(xr[q]) * row[q]);
                  rounding += half[q] * std::fabs(row[q]);
                }
                ASSERT_NEAR(y[i * n + j], want, 2e-6 * mag + 1e-6) << "y[" << i << "," << j << "]";
                ASSERT_NEAR(y[i * n + j], exact, rounding + 2e-6 * mag + 1e-6);
                ASSERT_EQ(acc[i * n + j], residual[i * n + j] + y[i * n + j]);
                ASSERT_EQ(alone[j], y[i * n + j]) << "row " << i << " alone, column " << j;
              }
            }
          }
    }
  }
}

// The tiles' bf16 activation layout (amx.h): element r * 32 + 2t + e of block (mb, kb) is
// f32_to_bf16 of x[16 mb + t][32 kb + 2r + e], zero past k and past m, with f32_to_bf16's
// rounding for ties, denormals, infinities and NaNs.
TEST(Weights, TileActivationLayoutRoundsAsF32ToBf16) {
  const IsaKernels* table = nullptr;
  for (const IsaKernels* t : supported_tables())
    if (t->tiles != nullptr) table = t;
  if (table == nullptr) SKIP_WITHOUT_AMX();
  // Ties to even (down and up), just past and short of a tie, denormals, the largest finite
  // value rounding to infinity, infinities, NaNs (one whose payload is only in the low bits).
  const uint32_t specials[] = {0x3F808000u, 0x3F818000u, 0xBF808000u, 0x3F808001u, 0x3F807FFFu,
                               0x00012345u, 0x80400000u, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u,
                               0x7FC00000u, 0x7F800001u, 0x80000000u, 0x3F7FFFFFu};
  std::mt19937 rng(53);
  for (int64_t k : {16, 45, 64, 100}) {
    const int64_t m = 19, k_blocks = (k + 31) / 32;
    auto x = random_vector(m * k, rng);
    for (size_t s = 0; s < std::size(specials); ++s)
      std::memcpy(&x[(s * 37) % x.size()], &specials[s], 4);
    std::vector<uint8_t> packed(table->tiles->packed_bytes(WeightType::kBF16, m, k), 0xEE);
    table->tiles->pack_rows(WeightType::kBF16, x.data(), m, k, 0, 7, packed.data());
    table->tiles->pack_rows(WeightType::kBF16, x.data(), m, k, 7, m, packed.data());
    const auto* h = reinterpret_cast<const uint16_t*>(packed.data());
    for (int64_t mb = 0; mb * 16 < m; ++mb)
      for (int64_t kb = 0; kb < k_blocks; ++kb)
        for (int r = 0; r < 16; ++r)
          for (int t = 0; t < 16; ++t)
            for (int e = 0; e < 2; ++e) {
              const int64_t i = mb * 16 + t, q = kb * 32 + 2 * r + e;
              const uint16_t want = i < m && q < k ? f32_to_bf16(x[i * k + q]) : 0;
              ASSERT_EQ(h[(mb * k_blocks + kb) * 512 + r * 32 + 2 * t + e], want)
                  << "k=" << k << " token " << i << " value " << q;
            }
  }
}

// The panel layouts (q4-panels, q8_0-panels) from q4 rows and from Q4_0 / Q8_0 blocks: lossless
// (every row dequantizes as its source; q4 comes back byte for byte), row views of whole panels,
// and the panel kernels of every table that has them (VNNI for few tokens, AMX tiles for more)
// near the reference of Q8_0-rounded activations and the dequantized weights, the fused residual
// add the same float addition, and each row's bits the same alone, in any batch, for any split of
// the columns at a panel, and on every table. n leaves a short last panel; garbage past the bytes.
TEST(Weights, PanelKernelsMatchTheReference) {
  std::vector<const IsaKernels*> tables;
  for (const IsaKernels* t : supported_tables())
    if (t->matmul_cols_panels != nullptr) tables.push_back(t);
  std::mt19937 rng(43);
  for (WeightType src :
       {WeightType::kQ4, WeightType::kQ4_0, WeightType::kQ8_0, WeightType::kI8, WeightType::kQ4_K,
        WeightType::kQ5_K, WeightType::kQ6_K, WeightType::kIQ4_NL, WeightType::kIQ4_XS})
    for (int64_t k : block_size(src) == 256 ? std::vector<int64_t>{256, 512}
                                            : std::vector<int64_t>{32, 96, 256})
      for (int64_t n : {9, 48, 53}) {
        SCOPED_TRACE(std::string(weight_type_name(src)) + " k=" + std::to_string(k) +
                     " n=" + std::to_string(n));
        const auto w = random_vector(n * k, rng);
        Packed q4(WeightType::kQ4, w, n, k), i8(WeightType::kI8, w, n, k);
        const bool rows = src == WeightType::kQ4 || src == WeightType::kI8;
        std::vector<uint8_t> blocks(rows ? 0 : WeightMatrix::row_bytes(src, k) * n);
        if (src == WeightType::kIQ4_XS) {  // no quantizer here: random blocks, sane scales
          for (auto& byte : blocks) byte = static_cast<uint8_t>(rng());
          for (size_t at = 0; at < blocks.size(); at += 136) {
            const uint16_t d = f32_to_f16(0.002f * static_cast<float>(1 + rng() % 8));
            std::memcpy(blocks.data() + at, &d, 2);
          }
        } else if (!rows) {
          quantize_blocks(src, w.data(), n * k, blocks.data());
        }
        const WeightMatrix source = src == WeightType::kQ4 ? q4.m
                                    : src == WeightType::kI8
                                        ? i8.m
                                        : WeightMatrix{src, blocks.data(), nullptr, n, k};
        const WeightType pt = panel_type(src);
        std::vector<uint8_t> data(WeightMatrix::row_bytes(pt, k) * n + 64, 0xAB);
        std::vector<uint16_t> scales(panel_scale_bytes(pt, n, k) / 2 + 32, 0x7E00);  // NaN past it
        const WeightMatrix pm =
            pack_panels(src, source.data, source.scales, n, k, data.data(), scales.data());
        ASSERT_EQ(pm.type, pt);
        ASSERT_EQ(pm.bytes(), WeightMatrix::row_bytes(pt, k) * n + panel_scale_bytes(pt, n, k));
        if (src == WeightType::kQ4_K) {  // Q4_K's 144 bytes per 256 values, scales unpacked: 148
          ASSERT_EQ(pm.bytes() * 144, source.bytes() * 148);
        }
        if (src == WeightType::kQ5_K) {  // Q5_K's 176, scales unpacked: 180
          ASSERT_EQ(pm.bytes() * 176, source.bytes() * 180);
        }
        if (src == WeightType::kIQ4_XS) {  // IQ4_XS's 136, its scales unpacked: 138
          ASSERT_EQ(pm.bytes() * 136, source.bytes() * 138);
        }
        if (src == WeightType::kQ6_K) {
          ASSERT_EQ(pm.bytes(), source.bytes());  // Q6_K's own size
        }
        std::vector<float> a(k), b(k);
        for (int64_t j = 0; j < n; ++j) {
          source.dequantize_row(j, a.data());
          pm.dequantize_row(j, b.data());
          ASSERT_EQ(a, b) << "row " << j;
        }
        if (n > 16) {
          pm.rows(16, n - 16).dequantize_row(n - 17, b.data());
          source.dequantize_row(n - 1, a.data());
          EXPECT_EQ(a, b);
        }
        if (src == WeightType::kQ4 || src == WeightType::kI8) {
          const Packed& rm = src == WeightType::kQ4 ? q4 : i8;
          std::vector<uint8_t> rows(WeightMatrix::row_bytes(src, k) * n);
          std::vector<uint8_t> sc(panel_scale_bytes(pt, n, k));
          panels_to_rows(pm, rows.data(), sc.data());
          EXPECT_TRUE(std::equal(rows.begin(), rows.end(), rm.data.begin()));
          EXPECT_TRUE(std::equal(sc.begin(), sc.end(), rm.scales.begin()));
        }
        if (tables.empty()) continue;
        for (int64_t m : {1, 2, 3, 5, 17, 33, 40}) {
          SCOPED_TRACE("m=" + std::to_string(m));
          auto x = random_vector(m * k, rng);
          x[std::min<int64_t>(5, m * k - 1)] = 40.0f;  // an outlier block
          const auto bias = random_vector(n, rng);
          const auto residual = random_vector(m * n, rng);
          auto run = [&](const IsaKernels* table, const float* xs, int64_t rows, bool accumulate,
                         int64_t split) {
            // Odd batches laid out for the tiles too (the AMX table then takes them), as matmul
            // does from TileKernels::panel_tokens; the others take the VNNI form on every table.
            BlockQ8Buffer buf;
            prepare_block_activations(rows, k, buf, rows % 2 == 1);
            for (int64_t i = 0; i < rows; ++i) quantize_block_row(xs, i, buf);
            std::vector<float> y(residual.begin(), residual.begin() + rows * n);
            table->matmul_cols_panels(buf.rows, pm, 0, split, bias.data(), y.data(), n, accumulate);
            table->matmul_cols_panels(buf.rows, pm, split, n, bias.data(), y.data(), n, accumulate);
            return y;
          };
          const auto y = run(tables[0], x.data(), m, false, std::min<int64_t>(n, 16));
          for (const IsaKernels* table : tables) {
            SCOPED_TRACE(table->name);
            ASSERT_EQ(run(table, x.data(), m, false, n), y) << "bits differ across tables";
            const auto acc = run(table, x.data(), m, true, n);
            std::vector<float> row(k);
            for (int64_t i = 0; i < m; ++i) {
              const auto alone = run(table, x.data() + i * k, 1, false, std::min<int64_t>(n, 16));
              std::vector<double> xr(k), half(k);
              for (int64_t bl = 0; bl < k / 32; ++bl) {
                double h = 0.0;
                q8_reference_block(x.data() + i * k + bl * 32, xr.data() + bl * 32, &h);
                std::fill(half.begin() + bl * 32, half.begin() + bl * 32 + 32, h);
              }
              for (int64_t j = 0; j < n; ++j) {
                source.dequantize_row(j, row.data());
                double want = bias[j], exact = bias[j], mag = std::fabs(bias[j]), rounding = 0.0;
                for (int64_t q = 0; q < k; ++q) {
                  want += xr[q] * row[q];
                  exact += static_cast<double>(x[i * k + q]) * row[q];
                  mag += std::fabs(xr[q] * row[q]);
                  rounding += half[q] * std::fabs(row[q]);
                }
                ASSERT_NEAR(y[i * n + j], want, 2e-6 * mag + 1e-6) << "y[" << i << "," << j << "]";
                ASSERT_NEAR(y[i * n + j], exact, rounding + 2e-6 * mag + 1e-6);
                ASSERT_EQ(acc[i * n + j], residual[i * n + j] + y[i * n + j]);
                ASSERT_EQ(alone[j], y[i * n + j]) << "row " << i << " alone, column " << j;
              }
            }
          }
        }
      }
  if (tables.empty())
    GTEST_SKIP() << "layouts checked; no panel kernels (AVX2 or AVX-512 VNNI) here";
}

// matmul() takes the panel kernels for the panel types, with the columns split among threads at
// panels: the same bits as one thread, whatever the batch around a row.
TEST(Weights, PanelMatmulIsBatchAndThreadInvariant) {
  if (isa().matmul_cols_panels == nullptr)
    GTEST_SKIP() << "no panel kernels (AVX2 or AVX-512 VNNI) here";
  std::mt19937 rng(47);
  // 13 whole panels and a short one (padded), a batch of 37: first tiles that fetch ahead, later
  // tiles and a tail of one token, for each panel layout of the common tile (q4, Q8_0, IQ4_NL).
  const int64_t n = 213, k = 320;
  for (WeightType src : {WeightType::kQ4_0, WeightType::kQ8_0, WeightType::kIQ4_NL}) {
    SCOPED_TRACE(weight_type_name(src));
    const auto w = random_vector(n * k, rng);
    std::vector<uint8_t> blocks(WeightMatrix::row_bytes(src, k) * n);
    quantize_blocks(src, w.data(), n * k, blocks.data());
    std::vector<uint8_t> data(WeightMatrix::row_bytes(panel_type(src), k) * n);
    std::vector<uint16_t> scales(n * k / 32);
    const WeightMatrix pm =
        pack_panels(src, blocks.data(), nullptr, n, k, data.data(), scales.data());
    const int64_t m = 37;
    const auto x = random_vector(m * k, rng);
    ThreadPool one(1), two(2);
    std::vector<float> y1(m * n), y2(m * n), alone(n);
    matmul(x.data(), m, pm, nullptr, y1.data(), one);
    matmul(x.data(), m, pm, nullptr, y2.data(), two);
    ASSERT_EQ(y1, y2);
    for (int64_t i : {int64_t{0}, int64_t{5}, int64_t{20}, m - 1}) {
      matmul(x.data() + i * k, 1, pm, nullptr, alone.data(), two);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(alone[j], y1[i * n + j]) << i << "," << j;
    }
  }
}

// Every table with the VNNI kernel that this CPU runs (avx512-vnni, avx512-bf16, amx).
TEST(Weights, Int8DotProductsMatchTheQuantizedReference) {
  std::vector<const IsaKernels*> tables;
  for (const IsaKernels* t : supported_tables())
    if (t->matmul_cols_q8 != nullptr) tables.push_back(t);
  if (tables.empty()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (const IsaKernels* table : tables) {
    SCOPED_TRACE(table->name);
    std::mt19937 rng(29);
    for (WeightType t : {WeightType::kI8, WeightType::kQ4, WeightType::kQ8_0, WeightType::kQ4_K,
                         WeightType::kQ5_K, WeightType::kQ6_K}) {
      const bool blocks = is_block_type(t);
      for (int64_t k : blocks&& block_size(t) == 256 ? std::vector<int64_t>{256, 512}
                                                     : std::vector<int64_t>{64, 128, 192}) {
        for (int64_t m : {1, 3, 17}) {
          SCOPED_TRACE(std::string(weight_type_name(t)) + " m=" + std::to_string(m) +
                       " k=" + std::to_string(k));
          const int64_t n = 9;
          const auto w = random_vector(n * k, rng);
          auto x = random_vector(m * k, rng);
          x[5] = 40.0f;  // an outlier: its block gets a coarse scale, the others do not
          const auto bias = random_vector(n, rng);
          // Q8_0 and Q4_K (read straight from their blocks) as ggml quantizes them; bytes past
          // the end that a kernel reading too far would take in.
          std::vector<uint8_t> bytes(WeightMatrix::row_bytes(t, k) * n + 64, 0xAB);
          Packed p(blocks ? WeightType::kI8 : t, w, n, k);
          if (blocks) {
            quantize_blocks(t, w.data(), n * k, bytes.data());
            p.m = {t, bytes.data(), nullptr, n, k};
          }
          QuantizedBuffer buf;
          const QuantizedRows& xq = quantize_activations(x.data(), m, k, q8_offset(t), buf);
          std::vector<float> y(m * n), yf(m * n);
          table->matmul_cols_q8(xq, p.m, 0, n, bias.data(), y.data(), n, false);
          if (blocks)
            kAvx512Kernels.matmul_cols_blocks(x.data(), m, k, p.m, 0, n, bias.data(), yf.data(), n,
                                              false);
          else
            kAvx512Kernels.matmul_cols(x.data(), m, k, p.m, 0, n, bias.data(), yf.data(), n, false);
          auto scale = [&](int64_t i, int64_t q) {
            return static_cast<double>(xq.lane_scale[(i * (k / 64) + q / 64) * 16 + (q % 64) / 4]);
          };
          for_each_reference(
              p.m, m, n, k, bias.data(),
              [&](int64_t i, int64_t q) { return xq.q[i * k + q] * scale(i, q); },
              [&](int64_t i, int64_t q) { return scale(i, q) / 2; },  // |x - xd| <= d / 2
              [&](int64_t i, int64_t j, double want, double mag, double rounding) {
                // Exact integer sums: only the f32 scaling rounds.
                ASSERT_NEAR(y[i * n + j], want, 1e-5 * mag + 1e-6) << "y[" << i << "," << j << "]";
                // And as close to the unquantized activations as rounding them allows.
                ASSERT_NEAR(y[i * n + j], yf[i * n + j], rounding + 1e-5 * mag + 1e-5);
              });
        }
      }
    }
  }
}

}  // namespace
}  // namespace tf::kernels
