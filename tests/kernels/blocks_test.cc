// The block kernels of ggml's formats (isa_blocks.inc), in every kernel table this CPU runs:
// one-hot activations read every weight back as the reference dequantization (ggml_quants.cc,
// itself checked against numpy in tests/reference/test_gguf.py) gives it; random activations give
// their dot product with the dequantized weights up to f32 rounding; a row's result never depends
// on its batch or the threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

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

// Byte offsets of a block's f16 scale fields (d, and dmin / m where the format has one).
std::vector<int> f16_fields(WeightType t) {
  switch (t) {
    case WeightType::kQ4_1:
    case WeightType::kQ5_1:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
      return {0, 2};
    case WeightType::kQ2_K:
      return {80, 82};
    case WeightType::kQ3_K:
      return {108};
    case WeightType::kQ6_K:
      return {208};
    case WeightType::kMXFP4:
      return {};  // an E8M0 exponent byte (random_blocks)
    default:
      return {0};
  }
}

// n rows of k values of type t: random bytes (every bit pattern of the quants and sub-scales)
// with finite scales of either sign, some large, some tiny.
std::vector<uint8_t> random_blocks(WeightType t, int64_t n, int64_t k, std::mt19937& rng) {
  const int64_t blocks = n * k / block_size(t);
  std::vector<uint8_t> data(static_cast<size_t>(blocks * block_bytes(t)));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : data) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> mag(-3.0f, 0.5f), sign(-1.0f, 1.0f);
  for (int64_t i = 0; i < blocks; ++i) {
    for (int off : f16_fields(t)) {
      const float v = std::pow(10.0f, mag(rng)) * (sign(rng) < 0 ? -1.0f : 1.0f);
      const uint16_t h = f32_to_f16(v);
      std::memcpy(data.data() + i * block_bytes(t) + off, &h, 2);
    }
    if (t == WeightType::kMXFP4)  // scales 2^-10 .. 2^5 (the extremes: Mxfp4ExtremeScales)
      data[static_cast<size_t>(i * block_bytes(t))] = static_cast<uint8_t>(118 + byte(rng) % 16);
  }
  return data;
}

std::vector<float> dequantized(WeightType t, const std::vector<uint8_t>& data, int64_t n,
                               int64_t k) {
  std::vector<float> w(static_cast<size_t>(n * k));
  dequantize_blocks(t, data.data(), n * k, w.data());
  return w;
}

std::string trace(const IsaKernels* table, WeightType t, int64_t k) {
  return std::string(table->name) + " " + std::string(weight_type_name(t)) +
         " k=" + std::to_string(k);
}

// MXFP4 from its description (OCP Microscaling Formats v1.0): every E2M1 nibble at every E8M0
// scale byte a model could hold, down to the subnormal powers of two and up to the largest whose
// values all stay finite in f32, read back through every table by one-hot activations.
TEST(BlockKernels, Mxfp4ExtremeScalesReadAsTheFormatSays) {
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  const int scales[] = {0, 1, 2, 3, 100, 126, 127, 128, 129, 200, 252};
  const int64_t k = 64, n = static_cast<int64_t>(std::size(scales));
  std::vector<uint8_t> data(static_cast<size_t>(n * 2 * 17));
  for (int64_t r = 0; r < n; ++r)
    for (int b = 0; b < 2; ++b) {
      uint8_t* blk = data.data() + (r * 2 + b) * 17;
      blk[0] = static_cast<uint8_t>(scales[r]);
      for (int j = 0; j < 16; ++j)  // element j: nibble j; element j + 16: nibble 15 - j
        blk[1 + j] = static_cast<uint8_t>((j + b) % 16 | ((15 - j) << 4));
    }
  const WeightMatrix w{WeightType::kMXFP4, data.data(), nullptr, n, k};
  for (const IsaKernels* table : supported_tables()) {
    for (int64_t c = 0; c < k; ++c) {
      std::vector<float> x(static_cast<size_t>(k), 0.0f), y(static_cast<size_t>(n));
      x[c] = 1.0f;
      table->matmul_cols_blocks(x.data(), 1, k, w, 0, n, nullptr, y.data(), n, false);
      for (int64_t r = 0; r < n; ++r) {
        const int b = static_cast<int>(c / 32), j = static_cast<int>(c % 32);
        const int nib = j < 16 ? (j + b) % 16 : 15 - (j - 16);
        const float want = std::ldexp(e2m1[nib], scales[r] - 127);
        ASSERT_EQ(y[r], want) << table->name << " scale byte " << scales[r] << " column " << c;
      }
    }
  }
}

TEST(BlockKernels, OneHotActivationsReadEveryWeightAsTheReferenceDequantizes) {
  std::mt19937 rng(3);
  for (const IsaKernels* table : supported_tables()) {
    for (WeightType t : kBlockTypes) {
      const int64_t k = 2 * block_size(t) + (block_size(t) == 32 ? 32 : 0), n = 3;
      SCOPED_TRACE(trace(table, t, k));
      const auto data = random_blocks(t, n, k, rng);
      const auto w = dequantized(t, data, n, k);
      // Row p of x is the unit vector e_p: y[p, j] is weight (j, p).
      std::vector<float> x(static_cast<size_t>(k * k), 0.0f);
      for (int64_t p = 0; p < k; ++p) x[p * k + p] = 1.0f;
      std::vector<float> y(static_cast<size_t>(k * n));
      const WeightMatrix m{t, data.data(), nullptr, n, k};
      table->matmul_cols_blocks(x.data(), k, k, m, 0, n, nullptr, y.data(), n, false);
      for (int64_t p = 0; p < k; ++p) {
        for (int64_t j = 0; j < n; ++j) {
          const float want = w[j * k + p];
          // Only the f32 scalings round, relative to the terms of the weight (scale times
          // quant, and the minimum), which its 16 neighbours bound.
          float group = 0.0f;
          for (int64_t e = p / 16 * 16; e < p / 16 * 16 + 16; ++e)
            group = std::max(group, std::fabs(w[j * k + e]));
          ASSERT_NEAR(y[p * n + j], want, 2e-6f * group + 1e-30f)
              << "weight (" << j << ", " << p << ")";
        }
      }
    }
  }
}

TEST(BlockKernels, RandomActivationsMatchTheDequantizedReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const IsaKernels* table : supported_tables()) {
    for (WeightType t : kBlockTypes) {
      for (int64_t blocks : {1, 3}) {
        const int64_t k = blocks * block_size(t), n = 7;
        // One tile of rows or fewer (the weights widened on the fly), and more (from a copy).
        for (int64_t rows : {1, 4, 9}) {
          SCOPED_TRACE(trace(table, t, k) + " m=" + std::to_string(rows));
          const auto data = random_blocks(t, n, k, rng);
          const auto w = dequantized(t, data, n, k);
          std::vector<float> x(static_cast<size_t>(rows * k)), bias(n);
          for (auto& v : x) v = normal(rng);
          for (auto& v : bias) v = normal(rng);
          x[3] = 50.0f;  // an outlier
          std::vector<float> y(static_cast<size_t>(rows * n), 1.0f);
          table->matmul_cols_blocks(x.data(), rows, k, WeightMatrix{t, data.data(), nullptr, n, k},
                                    0, n, bias.data(), y.data(), n, /*accumulate=*/true);
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double want = 1.0 + bias[j], mag = 1.0 + std::fabs(bias[j]);
              for (int64_t p = 0; p < k; ++p) {
                want += static_cast<double>(x[i * k + p]) * w[j * k + p];
                mag += std::fabs(static_cast<double>(x[i * k + p]) * w[j * k + p]);
              }
              // f32 products and sums of k terms: a few ulps of their magnitude.
              ASSERT_NEAR(y[i * n + j], want, 1e-5 * mag + 1e-6) << "y[" << i << "," << j << "]";
            }
          }
        }
      }
    }
  }
}

TEST(BlockKernels, ARowsResultDoesNotDependOnTheBatchOrTheThreads) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool one(1), two(2);
  for (WeightType t : kBlockTypes) {
    SCOPED_TRACE(std::string(weight_type_name(t)));
    const int64_t k = 2 * block_size(t), n = 37, rows = 6;
    const auto data = random_blocks(t, n, k, rng);
    const WeightMatrix m{t, data.data(), nullptr, n, k};
    std::vector<float> x(static_cast<size_t>(rows * k));
    for (auto& v : x) v = normal(rng);
    std::vector<float> batch(rows * n), threaded(rows * n), alone(n);
    matmul(x.data(), rows, m, nullptr, batch.data(), one);
    matmul(x.data(), rows, m, nullptr, threaded.data(), two);
    for (int64_t i = 0; i < rows; ++i) {
      matmul(x.data() + i * k, 1, m, nullptr, alone.data(), two);
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(batch[i * n + j], alone[j]) << i << "," << j;
        ASSERT_EQ(batch[i * n + j], threaded[i * n + j]) << i << "," << j;
      }
    }
  }
}

// The int8 block kernels (matmul_cols_blocks_q8: the AVX2 tables) against an independent
// computation: the activations quantized as Q8_0 (d = max|x| / 127, rounded half away from zero)
// and dequantized, times the dequantized weights, summed in double. The kernels' integer sums are
// exact, so only the f32 scalings and the correction terms round: bounded by the activations'
// magnitude times the largest weight of each 16.
struct Int8Case {
  WeightType t;
  std::vector<uint8_t> data, scales;
  std::vector<float> w;  // dequantized [n, k]
};

Int8Case int8_case(WeightType t, int64_t n, int64_t k, std::mt19937& rng) {
  Int8Case c{t, {}, {}, std::vector<float>(static_cast<size_t>(n * k))};
  if (is_block_type(t)) {
    c.data = random_blocks(t, n, k, rng);
    c.w = dequantized(t, c.data, n, k);
  } else {  // int8 / q4 from normal weights with an outlier
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::vector<float> src(static_cast<size_t>(n * k));
    for (auto& v : src) v = normal(rng);
    src[5] = 2.0f;
    quantize_rows(t, src.data(), n, k, c.data, c.scales);
    const WeightMatrix m{t, c.data.data(), c.scales.data(), n, k};
    for (int64_t j = 0; j < n; ++j) m.dequantize_row(j, c.w.data() + j * k);
  }
  return c;
}

std::vector<float> q8_0_round_trip(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0.0f;
    for (size_t e = b; e < b + 32; ++e) amax = std::max(amax, std::fabs(x[e]));
    const float d = amax / 127.0f;
    for (size_t e = b; e < b + 32; ++e)
      out[e] = d > 0.0f ? std::clamp(std::round(x[e] / d), -127.0f, 127.0f) * d : 0.0f;
  }
  return out;
}

TEST(BlockKernelsInt8, MatchTheQuantizedActivationsTimesTheDequantizedWeights) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<WeightType> types(std::begin(kBlockTypes), std::end(kBlockTypes));
  types.push_back(WeightType::kI8);
  types.push_back(WeightType::kQ4);
  int tables = 0;
  for (const IsaKernels* table : supported_tables()) {
    if (table->matmul_cols_blocks_q8 == nullptr) continue;
    ++tables;
    for (WeightType t : types) {
      const int64_t bs = std::max<int64_t>(32, block_size(t));
      // 11 blocks of 32: kernels that take 8 blocks' scales at a time, then a tail.
      for (int64_t blocks :
           bs == 32 ? std::vector<int64_t>{1, 3, 11} : std::vector<int64_t>{1, 3}) {
        const int64_t k = blocks * bs, n = 11;
        const Int8Case c = int8_case(t, n, k, rng);
        const WeightMatrix wm{t, c.data.data(), c.scales.empty() ? nullptr : c.scales.data(), n, k};
        // One tile of rows or fewer (decode: rows decoded 4 at a time) and more (a panel).
        for (int64_t rows : {1, 2, 9}) {
          SCOPED_TRACE(trace(table, t, k) + " m=" + std::to_string(rows));
          std::vector<float> x(static_cast<size_t>(rows * k)), bias(n);
          for (auto& v : x) v = normal(rng);
          for (auto& v : bias) v = normal(rng);
          x[3] = 50.0f;  // an outlier
          const auto xq = q8_0_round_trip(x);
          BlockQ8Buffer buf;
          prepare_block_activations(rows, k, buf);
          for (int64_t i = 0; i < rows; ++i) quantize_block_row(x.data(), i, buf);
          std::vector<float> y(static_cast<size_t>(rows * n), 1.0f);
          table->matmul_cols_blocks_q8(buf.rows, wm, 0, n, bias.data(), y.data(), n,
                                       /*accumulate=*/true);
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double want = 1.0 + bias[j], mag = 1.0 + std::fabs(bias[j]);
              for (int64_t p = 0; p < k; ++p) {
                want += static_cast<double>(xq[i * k + p]) * c.w[j * k + p];
                float group = 0.0f;
                for (int64_t e = p / 16 * 16; e < p / 16 * 16 + 16; ++e)
                  group = std::max(group, std::fabs(c.w[j * k + e]));
                mag += std::fabs(static_cast<double>(xq[i * k + p])) * group;
              }
              ASSERT_NEAR(y[i * n + j], want, 3e-6 * mag + 1e-6) << "y[" << i << "," << j << "]";
            }
          }
          // A row's result does not depend on the rows beside it.
          std::vector<float> alone(n);
          for (int64_t i = 0; i < rows && rows > 1; ++i) {
            BlockQ8Buffer one;
            prepare_block_activations(1, k, one);
            quantize_block_row(x.data() + i * k, 0, one);
            table->matmul_cols_blocks_q8(one.rows, wm, 0, n, bias.data(), alone.data(), n, false);
            for (int64_t j = 0; j < n; ++j)
              ASSERT_EQ(alone[j] + 1.0f, y[i * n + j]) << "row " << i << " col " << j;
          }
        }
      }
    }
  }
  if (tables == 0) GTEST_SKIP() << "no kernel table with int8 block dot products runs here";
}

// The activation quantizer (vector code on x86) against the Q8_0 rule written out: d = max|x| /
// 127, q = x * (1 / d) rounded half away from zero, clamped to +-127; the sums per 16 and 32.
TEST(BlockQ8, QuantizerRoundsHalfAwayFromZeroAsQ8_0) {
  const int64_t k = 96;
  std::vector<float> x(k, 0.0f);
  // Block 0: max 127, so d = 1 and x * (1 / d) is x itself: the halves show the rounding.
  const float halves[] = {2.5f, -2.5f, 0.5f,   -0.5f, 126.5f,     -126.5f,
                          0.4f, -0.0f, 127.0f, -1.5f, 1.4999999f, 3.0f};
  for (size_t e = 0; e < std::size(halves); ++e) x[e] = halves[e];
  const int want0[] = {3, -3, 1, -1, 127, -127, 0, 0, 127, -2, 1, 3};
  // Block 1: random; block 2: all zero (d = 0, quants 0).
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t e = 32; e < 64; ++e) x[e] = normal(rng);
  BlockQ8Buffer buf;
  prepare_block_activations(1, k, buf);
  quantize_block_row(x.data(), 0, buf);
  EXPECT_EQ(buf.d[0], 1.0f);
  for (size_t e = 0; e < std::size(want0); ++e) EXPECT_EQ(buf.q[e], want0[e]) << "x = " << x[e];
  for (int64_t b = 0; b < 3; ++b) {
    float amax = 0.0f;
    for (int64_t e = 32 * b; e < 32 * b + 32; ++e) amax = std::max(amax, std::fabs(x[e]));
    const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    EXPECT_EQ(buf.d[b], d);
    int sums[2] = {0, 0};
    for (int64_t e = 32 * b; e < 32 * b + 32; ++e) {
      const float v = x[e] * inv;
      const float r = std::trunc(v + (v < 0.0f ? -0.5f : 0.5f));
      const int q = static_cast<int>(std::clamp(r, -127.0f, 127.0f));
      ASSERT_EQ(buf.q[e], q) << "x[" << e << "] = " << x[e];
      sums[(e % 32) / 16] += q;
    }
    EXPECT_EQ(buf.s16[2 * b], d * static_cast<float>(sums[0]));
    EXPECT_EQ(buf.s16[2 * b + 1], d * static_cast<float>(sums[1]));
    EXPECT_EQ(buf.s32[b], d * static_cast<float>(sums[0] + sums[1]));
    EXPECT_EQ(buf.q32[b], sums[0] + sums[1]);
    EXPECT_EQ(buf.q16[b], sums[0]);
  }
}

TEST(BlockKernels, RowsAndDequantizeRowAddressWholeBlocks) {
  std::mt19937 rng(8);
  for (WeightType t : kBlockTypes) {
    const int64_t k = block_size(t) * 2, n = 4;
    const auto data = random_blocks(t, n, k, rng);
    const auto w = dequantized(t, data, n, k);
    const WeightMatrix m{t, data.data(), nullptr, n, k};
    EXPECT_EQ(m.bytes(), static_cast<int64_t>(data.size()));
    const WeightMatrix tail = m.rows(2, 2);
    std::vector<float> row(k);
    tail.dequantize_row(1, row.data());
    for (int64_t p = 0; p < k; ++p) ASSERT_EQ(row[p], w[3 * k + p]) << weight_type_name(t);
    std::vector<uint8_t> d, sc;
    EXPECT_THROW(quantize_rows(t, w.data(), n, k, d, sc), Error) << weight_type_name(t);
  }
}

TEST(BlockQuantizers, RoundTripWithinEachFormatsError) {
  // Normal values with an outlier per row: the RMS error of quantize -> dequantize, relative to
  // the values' RMS, stays under each format's bound (its bits), and types without a writer say
  // so by name.
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::pair<WeightType, double> bounds[] = {
      {WeightType::kQ8_0, 0.008}, {WeightType::kQ4_0, 0.12},  {WeightType::kQ4_1, 0.095},
      {WeightType::kQ5_0, 0.063}, {WeightType::kQ5_1, 0.046}, {WeightType::kQ4_K, 0.097},
      {WeightType::kQ5_K, 0.046}, {WeightType::kQ6_K, 0.026}, {WeightType::kIQ4_NL, 0.11}};
  for (const auto& [t, bound] : bounds) {
    SCOPED_TRACE(std::string(weight_type_name(t)));
    ASSERT_TRUE(can_quantize_blocks(t));
    const int64_t n = 4096;
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = normal(rng) * 0.05f + 0.01f;
    x[100] = 1.5f;
    std::vector<uint8_t> blocks(static_cast<size_t>(n / block_size(t) * block_bytes(t)));
    quantize_blocks(t, x.data(), n, blocks.data());
    dequantize_blocks(t, blocks.data(), n, y.data());
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      err += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
      ref += x[i] * static_cast<double>(x[i]);
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LT(rel, bound) << "rel " << rel;
    EXPECT_GT(rel, 0.0);
    // All zeros stay zeros (scales 0, no division by zero).
    std::vector<float> zeros(n, 0.0f);
    quantize_blocks(t, zeros.data(), n, blocks.data());
    dequantize_blocks(t, blocks.data(), n, y.data());
    for (float v : y) ASSERT_EQ(v, 0.0f);
  }
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_THROW(quantize_blocks(WeightType::kQ2_K, x.data(), 256, out.data()), Error);
  EXPECT_THROW(quantize_blocks(WeightType::kQ4_K, x.data(), 255, out.data()), Error);
}

}  // namespace
}  // namespace tf::kernels
