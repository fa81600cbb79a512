// The weight dtypes: quantization round trips within their error bounds, and the matmul of every
// ISA table over every dtype equals a double-precision reference over the dequantized weights,
// for odd sizes; and results are bitwise independent of the batch around a row and of threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

namespace tf::kernels {
namespace {

const WeightType kTypes[] = {WeightType::kF32, WeightType::kBF16, WeightType::kF16, WeightType::kI8,
                             WeightType::kQ4};

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
    quantize_rows(t, w.data(), n, k, data, scales);
    data.resize(data.size() + 64, 0xAB);  // reading past the end shows in the results
    m = {t, data.data(), scales.empty() ? nullptr : scales.data(), n, k};
  }
};

std::vector<int64_t> ks_for(WeightType t) {
  if (t == WeightType::kQ4) return {32, 64, 96, 160};
  return {1, 3, 7, 16, 17, 33, 64, 100};
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
            ASSERT_EQ(row[i], x);
            break;
          case WeightType::kBF16:
            ASSERT_LE(err, std::fabs(x) * 0x1p-8f) << i;
            break;
          case WeightType::kF16:
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
      // A sub-matrix of rows reads the same weights.
      const WeightMatrix tail = p.m.rows(5, 10);
      std::vector<float> part(m * 10);
      matmul(x.data(), m, tail, nullptr, part.data(), two);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < 10; ++j) ASSERT_EQ(part[i * 10 + j], all[i * n + 5 + j]);
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

// Every table with bf16 dot products (avx512-bf16's vdpbf16ps, the AMX tiles), in the activation
// layout the table takes: n and k past whole tiles (the AMX tiles' 16 rows and 32 values), m past
// whole blocks of 16 tokens, with and without the fused residual add.
TEST(Weights, Bf16DotProductsMatchTheRoundedReference) {
  std::vector<const IsaKernels*> tables;
  for (const IsaKernels* t : supported_tables())
    if (t->matmul_cols_bf16 != nullptr) tables.push_back(t);
  if (tables.empty()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::mt19937 rng(31);
  for (const IsaKernels* table : tables)
    for (int64_t k : {1, 7, 32, 33, 64, 100})
      for (int64_t m : {1, 3, 17, 40})
        for (int64_t n : {9, 37}) {
          SCOPED_TRACE(std::string(table->name) + " m=" + std::to_string(m) +
                       " k=" + std::to_string(k) + " n=" + std::to_string(n));
          const auto w = random_vector(n * k, rng);
          const auto x = random_vector(m * k, rng);
          const auto bias = random_vector(n, rng);
          const auto residual = random_vector(m * n, rng);
          Packed p(WeightType::kBF16, w, n, k);
          std::vector<uint16_t> xb(m * k);
          for (int64_t i = 0; i < m * k; ++i) xb[i] = f32_to_bf16(x[i]);
          std::vector<uint16_t> packed = xb;
          if (table->pack_bf16_rows != nullptr) {
            packed.assign(table->bf16_packed_size(m, k), 0xffff);  // NaN unless written
            table->pack_bf16_rows(x.data(), m, k, 0, m / 2, packed.data());
            table->pack_bf16_rows(x.data(), m, k, m / 2, m, packed.data());
          }
          // Two column ranges split at the table's granule, as matmul's threads take them.
          const int64_t split = std::min<int64_t>(n, table->bf16_col_granule);
          std::vector<float> y(m * n), acc = residual;
          for (bool accumulate : {false, true}) {
            float* out = accumulate ? acc.data() : y.data();
            table->matmul_cols_bf16(packed.data(), m, k, p.m, 0, split, bias.data(), out, n,
                                    accumulate);
            table->matmul_cols_bf16(packed.data(), m, k, p.m, split, n, bias.data(), out, n,
                                    accumulate);
          }
          std::vector<float> row(k);
          for (int64_t j = 0; j < n; ++j) {
            p.m.dequantize_row(j, row.data());
            for (int64_t i = 0; i < m; ++i) {
              double want = bias[j], mag = std::fabs(bias[j]), rounding = 0.0;
              for (int64_t q = 0; q < k; ++q) {
                const double xr = bf16_to_f32(xb[i * k + q]);
                want += xr * row[q];
                mag += std::fabs(xr * row[q]);
                rounding += std::fabs(x[i * k + q] * 0x1p-8 * row[q]);
              }
              ASSERT_NEAR(y[i * n + j], want, 2e-6 * mag + 1e-6) << "y[" << i << "," << j << "]";
              double exact = bias[j];
              for (int64_t q = 0; q < k; ++q) exact += static_cast<double>(x[i * k + q]) * row[q];
              ASSERT_NEAR(y[i * n + j], exact, rounding + 2e-6 * mag + 1e-6);
              // The residual add is the same float addition as a separate one.
              ASSERT_EQ(acc[i * n + j], residual[i * n + j] + y[i * n + j]);
            }
          }
        }
}

TEST(Weights, Int8DotProductsMatchTheQuantizedReference) {
  if (kAvx512VnniKernels.matmul_cols_q8 == nullptr || !cpu_features().has_avx512_kernels() ||
      !cpu_features().avx512_vnni) {
    GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  }
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
        kAvx512VnniKernels.matmul_cols_q8(xq, p.m, 0, n, bias.data(), y.data(), n, false);
        if (blocks)
          kAvx512Kernels.matmul_cols_blocks(x.data(), m, k, p.m, 0, n, bias.data(), yf.data(), n,
                                            false);
        else
          kAvx512Kernels.matmul_cols(x.data(), m, k, p.m, 0, n, bias.data(), yf.data(), n, false);
        std::vector<float> row(k);
        for (int64_t j = 0; j < n; ++j) {
          p.m.dequantize_row(j, row.data());
          for (int64_t i = 0; i < m; ++i) {
            double want = bias[j], mag = std::fabs(bias[j]), rounding = 0.0;
            for (int64_t q = 0; q < k; ++q) {
              const double d = xq.lane_scale[(i * (k / 64) + q / 64) * 16 + (q % 64) / 4];
              const double xd = xq.q[i * k + q] * d;
              want += xd * row[q];
              mag += std::fabs(xd * row[q]);
              rounding += d / 2 * std::fabs(row[q]);  // |x - xd| <= d / 2
            }
            // Exact integer sums: only the f32 scaling rounds.
            ASSERT_NEAR(y[i * n + j], want, 1e-5 * mag + 1e-6) << "y[" << i << "," << j << "]";
            // And as close to the unquantized activations as rounding them allows.
            ASSERT_NEAR(y[i * n + j], yf[i * n + j], rounding + 1e-5 * mag + 1e-5);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tf::kernels
