#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace tf {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

bool f16_is_nan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}
bool bf16_is_nan(uint16_t h) {
  return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}

// --- f16 --------------------------------------------------------------------------------------

TEST(F16, EveryBitPatternRoundTrips) {
  int nan_count = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = f16_to_f32(h);
    const uint16_t back = f32_to_f16(f);
    if (f16_is_nan(h)) {
      ++nan_count;
      ASSERT_TRUE(std::isnan(f)) << std::hex << "0x" << i;
      ASSERT_TRUE(f16_is_nan(back)) << std::hex << "0x" << i << " -> 0x" << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << "NaN sign lost for 0x" << std::hex << i;
    } else {
      ASSERT_FALSE(std::isnan(f)) << std::hex << "0x" << i;
      ASSERT_EQ(back, h) << std::hex << "0x" << i << " -> " << f << " -> 0x" << back;
    }
  }
  EXPECT_EQ(nan_count, 2 * 1023);
}

TEST(F16, WideningIsExact) {
  // Every finite f16 value is k * 2^e with an 11-bit k; check against ldexp.
  for (uint32_t i = 0; i < 0x7c00; ++i) {
    const uint32_t exp = i >> 10;
    const uint32_t mant = i & 0x3ffu;
    const double expected =
        exp == 0 ? std::ldexp(static_cast<double>(mant), -24)
                 : std::ldexp(static_cast<double>(mant + 1024), static_cast<int>(exp) - 25);
    ASSERT_EQ(static_cast<double>(f16_to_f32(static_cast<uint16_t>(i))), expected)
        << std::hex << "0x" << i;
    ASSERT_EQ(static_cast<double>(f16_to_f32(static_cast<uint16_t>(i | 0x8000u))), -expected)
        << std::hex << "0x" << i;
  }
}

TEST(F16, KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f16_to_f32(0xc100), -2.5f);
  EXPECT_EQ(f32_to_f16(-2.5f), 0xc100);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff);

  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f16_to_f32(0x7c00), inf);
  EXPECT_EQ(f16_to_f32(0xfc00), -inf);
  EXPECT_EQ(f32_to_f16(inf), 0x7c00);
  EXPECT_EQ(f32_to_f16(-inf), 0xfc00);

  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload lives only in the low bits must not truncate to infinity.
  EXPECT_TRUE(f16_is_nan(f32_to_f16(float_of(0x7f800001u))));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(float_of(0xff800001u))));

  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);
}

TEST(F16, RoundsToNearestEvenOnHalfwayCases) {
  const float ulp1 = std::ldexp(1.0f, -10);  // f16 spacing in [1, 2)
  // Halfway between 0x3c00 (even) and 0x3c01: down to even.
  EXPECT_EQ(f32_to_f16(1.0f + ulp1 / 2), 0x3c00);
  // Halfway between 0x3c01 and 0x3c02 (even): up to even.
  EXPECT_EQ(f32_to_f16(1.0f + 3 * ulp1 / 2), 0x3c02);
  // Just off halfway goes to the nearer one.
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + ulp1 / 2, 2.0f)), 0x3c01);
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + 3 * ulp1 / 2, 0.0f)), 0x3c01);
  EXPECT_EQ(f32_to_f16(-(1.0f + ulp1 / 2)), 0xbc00);
  EXPECT_EQ(f32_to_f16(-(1.0f + 3 * ulp1 / 2)), 0xbc02);

  // Subnormal range: units of 2^-24.
  const float tiny = std::ldexp(1.0f, -24);
  EXPECT_EQ(f32_to_f16(tiny / 2), 0x0000);  // halfway between 0 and 1: to 0
  EXPECT_EQ(f32_to_f16(std::nextafter(tiny / 2, 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(1.5f * tiny), 0x0002);  // halfway between 1 and 2: to 2
  EXPECT_EQ(f32_to_f16(2.5f * tiny), 0x0002);  // halfway between 2 and 3: to 2
  EXPECT_EQ(f32_to_f16(-1.5f * tiny), 0x8002);
  // Halfway between the largest subnormal (0x03ff) and the smallest normal (0x0400, even).
  EXPECT_EQ(f32_to_f16(1023.5f * tiny), 0x0400);
  EXPECT_EQ(f32_to_f16(1022.5f * tiny), 0x03fe);
  // Below half the smallest subnormal: signed zero.
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-10f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);

  // Carry out of the mantissa into the exponent: 2047.5*2^-10 rounds to 2.0.
  EXPECT_EQ(f32_to_f16(2.0f - ulp1 / 4), 0x4000);

  // Exhaustive: the midpoint between every pair of adjacent positive finite f16 values.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double lo = f16_to_f32(static_cast<uint16_t>(h));
    const double hi = f16_to_f32(static_cast<uint16_t>(h + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact in f32
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (h & 1u) == 0 ? static_cast<uint16_t>(h) : static_cast<uint16_t>(h + 1);
    ASSERT_EQ(f32_to_f16(mid), even) << "midpoint after 0x" << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), h)
        << "below midpoint after 0x" << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), h + 1)
        << "above midpoint after 0x" << std::hex << h;
  }
}

TEST(F16, OverflowsToInfinity) {
  // 65520 is halfway between 65504 (0x7bff, odd) and 65536 (not representable): rounds to inf.
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65536.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::lowest()), 0xfc00);
}

// --- bf16 -------------------------------------------------------------------------------------

TEST(BF16, EveryBitPatternRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = bf16_to_f32(h);
    ASSERT_EQ(bits_of(f), i << 16);
    const uint16_t back = f32_to_bf16(f);
    if (bf16_is_nan(h)) {
      ASSERT_TRUE(bf16_is_nan(back)) << std::hex << "0x" << i << " -> 0x" << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u);
    } else {
      ASSERT_EQ(back, h) << std::hex << "0x" << i;
    }
  }
}

TEST(BF16, RoundsToNearestEven) {
  // 1.0 is 0x3f80; bf16 keeps 7 mantissa bits, so the halfway point sets f32 bit 15.
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808000u)), 0x3f80);  // halfway, to even (down)
  EXPECT_EQ(f32_to_bf16(float_of(0x3f818000u)), 0x3f82);  // halfway, to even (up)
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808001u)), 0x3f81);  // above halfway
  EXPECT_EQ(f32_to_bf16(float_of(0x3f807fffu)), 0x3f80);  // below halfway
  EXPECT_EQ(f32_to_bf16(float_of(0x3f817fffu)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(float_of(0xbf818000u)), 0xbf82);  // sign does not matter
  EXPECT_EQ(f32_to_bf16(float_of(0x3fff8000u)), 0x4000);  // carry into the exponent
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.5f), 0xc020);
  // The largest finite f32 is above the last bf16 midpoint: infinity.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(float_of(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
}

TEST(BF16, NaNStaysNaN) {
  // Payloads only in the low 16 bits would truncate (or round) to infinity or the next binade.
  for (uint32_t bits : {0x7f800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu, 0xff800001u,
                        0xffffffffu, 0x7f8f8000u}) {
    const uint16_t h = f32_to_bf16(float_of(bits));
    EXPECT_TRUE(bf16_is_nan(h)) << std::hex << "0x" << bits << " -> 0x" << h;
    EXPECT_EQ(h & 0x8000u, (bits >> 16) & 0x8000u) << std::hex << "0x" << bits;
  }
}

// --- names and sizes --------------------------------------------------------------------------

struct NameCase {
  const char* name;
  DType type;
  size_t size;
};

constexpr NameCase kNames[] = {
    {"F64", DType::kF64, 8},   {"F32", DType::kF32, 4},        {"F16", DType::kF16, 2},
    {"BF16", DType::kBF16, 2}, {"I64", DType::kI64, 8},        {"I32", DType::kI32, 4},
    {"I16", DType::kI16, 2},   {"I8", DType::kI8, 1},          {"U8", DType::kU8, 1},
    {"BOOL", DType::kBool, 1}, {"F8_E4M3", DType::kF8E4M3, 1}, {"F8_E5M2", DType::kF8E5M2, 1},
};

TEST(DTypeNames, ParseNameAndSizeOfEverySafetensorsType) {
  for (const auto& c : kNames) {
    SCOPED_TRACE(c.name);
    const auto parsed = parse_dtype(c.name);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, c.type);
    EXPECT_EQ(dtype_name(c.type), c.name);
    EXPECT_EQ(dtype_size(c.type), c.size);
  }
}

TEST(DTypeNames, UnknownNamesAreNullopt) {
  for (const char* name : {"f32", "FP32", "", "F", "F320", "bf16", "BOOL ", "F8_E4M3FN", "U16"}) {
    EXPECT_FALSE(parse_dtype(name).has_value()) << "'" << name << "'";
  }
  // Not NUL-terminated views: only the view's characters count.
  const std::string padded = "F32X";
  EXPECT_EQ(parse_dtype(std::string_view(padded).substr(0, 3)), DType::kF32);
  EXPECT_FALSE(parse_dtype(std::string_view(padded).substr(0, 2)).has_value());
}

// --- convert_to_f32 ---------------------------------------------------------------------------

template <typename T>
std::vector<uint8_t> misaligned_bytes(const std::vector<T>& values) {
  // One leading pad byte, so the payload is not aligned for T.
  std::vector<uint8_t> bytes(1 + values.size() * sizeof(T), 0xAB);
  std::memcpy(bytes.data() + 1, values.data(), values.size() * sizeof(T));
  return bytes;
}

TEST(ConvertToF32, F16) {
  const std::vector<uint16_t> src = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x8000, 0x7c00, 0x7e00};
  const auto bytes = misaligned_bytes(src);
  std::vector<float> dst(src.size() + 1, 42.0f);
  convert_to_f32(DType::kF16, bytes.data() + 1, src.size(), dst.data());
  EXPECT_EQ(dst[0], 1.0f);
  EXPECT_EQ(dst[1], -2.5f);
  EXPECT_EQ(dst[2], 65504.0f);
  EXPECT_EQ(dst[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(bits_of(dst[4]), 0x80000000u);
  EXPECT_EQ(dst[5], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(dst[6]));
  EXPECT_EQ(dst[7], 42.0f);  // nothing past n is written
}

TEST(ConvertToF32, BF16) {
  const std::vector<uint16_t> src = {0x3f80, 0xc020, 0x7f80, 0x0001, 0x7fc0};
  const auto bytes = misaligned_bytes(src);
  std::vector<float> dst(src.size() + 1, 42.0f);
  convert_to_f32(DType::kBF16, bytes.data() + 1, src.size(), dst.data());
  EXPECT_EQ(dst[0], 1.0f);
  EXPECT_EQ(dst[1], -2.5f);
  EXPECT_EQ(dst[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits_of(dst[3]), 0x00010000u);
  EXPECT_TRUE(std::isnan(dst[4]));
  EXPECT_EQ(dst[5], 42.0f);
}

TEST(ConvertToF32, F32) {
  const std::vector<float> src = {1.0f, -2.5f, 3.14159f, -0.0f, 1e-40f};
  const auto bytes = misaligned_bytes(src);
  std::vector<float> dst(src.size() + 1, 42.0f);
  convert_to_f32(DType::kF32, bytes.data() + 1, src.size(), dst.data());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(bits_of(dst[i]), bits_of(src[i])) << i;
  EXPECT_EQ(dst[5], 42.0f);
}

TEST(ConvertToF32, F64) {
  const std::vector<double> src = {1.0, -2.5, 0.1, 1e300, -1e-300};
  const auto bytes = misaligned_bytes(src);
  std::vector<float> dst(src.size() + 1, 42.0f);
  convert_to_f32(DType::kF64, bytes.data() + 1, src.size(), dst.data());
  EXPECT_EQ(dst[0], 1.0f);
  EXPECT_EQ(dst[1], -2.5f);
  EXPECT_EQ(dst[2], 0.1f);
  EXPECT_EQ(dst[3], std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits_of(dst[4]), 0x80000000u);
  EXPECT_EQ(dst[5], 42.0f);
}

TEST(ConvertToF32, ZeroElementsWritesNothing) {
  float dst = 42.0f;
  const uint16_t src = 0x3c00;
  convert_to_f32(DType::kF16, &src, 0, &dst);
  EXPECT_EQ(dst, 42.0f);
}

TEST(ConvertToF32, RejectsNonFloatTypes) {
  const int32_t src[2] = {1, 2};
  float dst[2] = {0, 0};
  EXPECT_THROW(convert_to_f32(DType::kI32, src, 2, dst), Error);
  try {
    convert_to_f32(DType::kI32, src, 2, dst);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("I32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(convert_to_f32(DType::kU8, src, 2, dst), Error);
  EXPECT_THROW(convert_to_f32(DType::kBool, src, 2, dst), Error);
}

}  // namespace
}  // namespace tf
