#include "kernels/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/ggml_quants.h"

namespace tf::kernels {

std::string_view weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kF16:
      return "f16";
    case WeightType::kI8:
      return "int8";
    case WeightType::kQ4:
      return "q4";
    case WeightType::kQ4Panels:
      return "q4-panels";
    case WeightType::kQ8_0Panels:
      return "q8_0-panels";
    case WeightType::kI8Panels:
      return "i8-panels";
    case WeightType::kQ4_KPanels:
      return "q4_k-panels";
    case WeightType::kQ5_KPanels:
      return "q5_k-panels";
    case WeightType::kIQ4_NLPanels:
      return "iq4_nl-panels";
    case WeightType::kIQ4_XSPanels:
      return "iq4_xs-panels";
    case WeightType::kQ6_KPanels:
      return "q6_k-panels";
    case WeightType::kF32Panels:
      return "f32-panels";
    case WeightType::kF16Panels:
      return "f16-panels";
    case WeightType::kBF16Panels:
      return "bf16-panels";
    case WeightType::kQ8_0:
      return "q8_0";
    case WeightType::kQ4_0:
      return "q4_0";
    case WeightType::kQ4_1:
      return "q4_1";
    case WeightType::kQ5_0:
      return "q5_0";
    case WeightType::kQ5_1:
      return "q5_1";
    case WeightType::kQ2_K:
      return "q2_k";
    case WeightType::kQ3_K:
      return "q3_k";
    case WeightType::kQ4_K:
      return "q4_k";
    case WeightType::kQ5_K:
      return "q5_k";
    case WeightType::kQ6_K:
      return "q6_k";
    case WeightType::kIQ4_NL:
      return "iq4_nl";
    case WeightType::kIQ4_XS:
      return "iq4_xs";
    case WeightType::kMXFP4:
      return "mxfp4";
  }
  return "?";
}

int64_t block_size(WeightType t) {
  switch (t) {
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
    case WeightType::kIQ4_NL:
    case WeightType::kMXFP4:
      return 32;
    case WeightType::kQ2_K:
    case WeightType::kQ3_K:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
    case WeightType::kQ6_K:
    case WeightType::kIQ4_XS:
      return 256;
    default:
      return 1;
  }
}

int64_t block_bytes(WeightType t) {
  switch (t) {
    case WeightType::kF32:
    case WeightType::kF32Panels:
      return 4;
    case WeightType::kBF16:
    case WeightType::kF16:
    case WeightType::kF16Panels:
    case WeightType::kBF16Panels:
      return 2;
    case WeightType::kI8:
    case WeightType::kQ4:  // not a block format: its scales live apart (row_bytes: k / 2)
    case WeightType::kQ4Panels:
    case WeightType::kQ8_0Panels:
    case WeightType::kI8Panels:
    case WeightType::kQ4_KPanels:
    case WeightType::kQ5_KPanels:
    case WeightType::kQ6_KPanels:
    case WeightType::kIQ4_NLPanels:
    case WeightType::kIQ4_XSPanels:
      return 1;
    case WeightType::kQ8_0:
      return 34;
    case WeightType::kQ4_0:
      return 18;
    case WeightType::kQ4_1:
      return 20;
    case WeightType::kQ5_0:
      return 22;
    case WeightType::kQ5_1:
      return 24;
    case WeightType::kQ2_K:
      return 84;
    case WeightType::kQ3_K:
      return 110;
    case WeightType::kQ4_K:
      return 144;
    case WeightType::kQ5_K:
      return 176;
    case WeightType::kQ6_K:
      return 210;
    case WeightType::kIQ4_NL:
      return 18;
    case WeightType::kIQ4_XS:
      return 136;
    case WeightType::kMXFP4:
      return 17;
  }
  return 0;
}

WeightType parse_weight_type(std::string_view name) {
  if (name == "f32") return WeightType::kF32;
  if (name == "bf16") return WeightType::kBF16;
  if (name == "f16") return WeightType::kF16;
  if (name == "int8" || name == "i8") return WeightType::kI8;
  if (name == "q4") return WeightType::kQ4;
  fail("unknown weight dtype '{}': use f32, bf16, f16, int8 or q4", name);
}

int64_t WeightMatrix::row_bytes(WeightType t, int64_t k) {
  switch (t) {
    case WeightType::kF32:
    case WeightType::kF32Panels:
      return k * 4;
    case WeightType::kBF16:
    case WeightType::kF16:
    case WeightType::kF16Panels:
    case WeightType::kBF16Panels:
      return k * 2;
    case WeightType::kI8:
    case WeightType::kQ8_0Panels:
    case WeightType::kI8Panels:
      return k;
    case WeightType::kQ4:
    case WeightType::kQ4Panels:
    case WeightType::kIQ4_NLPanels:
      return k / 2;
    case WeightType::kIQ4_XSPanels:
      return k / 256 * 138;
    case WeightType::kQ4_KPanels:
      return k / 256 * 148;
    case WeightType::kQ5_KPanels:
      return k / 256 * 180;
    case WeightType::kQ6_KPanels:
      return k / 256 * 210;
    default:
      return k / block_size(t) * block_bytes(t);
  }
}

int64_t WeightMatrix::bytes() const {
  int64_t b = row_bytes(type, k) * n;
  if (type == WeightType::kI8 || type == WeightType::kI8Panels) b += n * 4;
  if (type == WeightType::kQ4 || type == WeightType::kQ4Panels || type == WeightType::kQ8_0Panels ||
      type == WeightType::kIQ4_NLPanels)
    b += n * (k / kQ4Group) * 2;
  return b;
}

WeightMatrix WeightMatrix::rows(int64_t first, int64_t count) const {
  TF_CHECK(first >= 0 && count >= 0 && first + count <= n);
  if (is_any_panel_type(type))
    TF_CHECK(first % kPanelRows == 0 && (count % kPanelRows == 0 || first + count == n));
  WeightMatrix w = *this;
  w.n = count;
  w.data = static_cast<const uint8_t*>(data) + first * row_bytes(type, k);
  if (type == WeightType::kI8 || type == WeightType::kI8Panels)
    w.scales = static_cast<const float*>(scales) + first;
  if (type == WeightType::kQ4 || type == WeightType::kQ4Panels || type == WeightType::kQ8_0Panels ||
      type == WeightType::kIQ4_NLPanels)
    w.scales = static_cast<const uint16_t*>(scales) + first * (k / kQ4Group);
  return w;
}

namespace {

// Bytes of one row's block of 32 in a panel (B in weights.h).
int64_t panel_block_bytes(WeightType t) {
  return t == WeightType::kQ4Panels || t == WeightType::kIQ4_NLPanels ? 16 : 32;
}

// Where panel p of w lies: its rows, its first data byte and its first scale (f16, or
// i8-panels' floats).
struct PanelAt {
  int64_t rows;
  const uint8_t* data;
  const uint16_t* scales;
  const float* row_scales;
};
PanelAt panel_at(const WeightMatrix& w, int64_t p) {
  const int64_t r0 = p * kPanelRows;
  const bool i8 = w.type == WeightType::kI8Panels;
  return {std::min<int64_t>(kPanelRows, w.n - r0),
          static_cast<const uint8_t*>(w.data) + r0 * WeightMatrix::row_bytes(w.type, w.k),
          i8 ? nullptr : static_cast<const uint16_t*>(w.scales) + r0 * (w.k / kQ4Group),
          i8 ? static_cast<const float*>(w.scales) + r0 : nullptr};
}

// Calls fn(block, out, R, r) for each row r's super-block of `in` bytes (a ggml K-quant block) and
// its place `out` in a panel of R rows taking `out_bytes` a row per super-block, the panels zeroed
// first.
template <typename Fn>
void for_each_super_block(const void* blocks, int64_t n, int64_t k, int64_t in, int64_t out_bytes,
                          uint8_t* data, Fn fn) {
  TF_CHECK(k % 256 == 0);
  const int64_t sbs = k / 256, row_bytes = sbs * out_bytes;
  const auto* src = static_cast<const uint8_t*>(blocks);
  for (int64_t p = 0; p * kPanelRows < n; ++p) {
    const int64_t R = std::min<int64_t>(kPanelRows, n - p * kPanelRows);
    uint8_t* panel = data + p * kPanelRows * row_bytes;
    std::memset(panel, 0, static_cast<size_t>(R * row_bytes));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t sb = 0; sb < sbs; ++sb)
        fn(src + ((p * kPanelRows + r) * sbs + sb) * in, panel + sb * out_bytes * R, R, r);
  }
}

// Q4_K's (d, dmin, scales, qs) or Q5_K's (d, dmin, scales, qh, qs) blocks into q4_k- / q5_k-panels.
WeightMatrix pack_k45_panels(bool q5, const void* blocks, int64_t n, int64_t k, uint8_t* data) {
  const int64_t qs = q5 ? 48 : 16, ds = q5 ? 160 : 128;
  for_each_super_block(
      blocks, n, k, q5 ? 176 : 144, q5 ? 180 : 148, data,
      [&](const uint8_t* b, uint8_t* o, int64_t R, int64_t r) {
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t u = 0; u < 8; ++u) {
            std::memcpy(o + j * 32 * R + u * 4 * R + 4 * r, b + qs + 32 * j + 4 * u, 4);
            // value 64j + 32t + 4u + e's fifth bit: Q5_K's qh[4u + e], bit 2j + t
            for (int t = 0; q5 && t < 2; ++t)
              for (int e = 0; e < 4; ++e)
                o[128 * R + j * 8 * R + t * 4 * R + 4 * r + e] |=
                    static_cast<uint8_t>(((b[16 + 4 * u + e] >> (2 * j + t)) & 1) << u);
          }
        std::memcpy(o + ds * R + 2 * r, b, 2);
        std::memcpy(o + (ds + 2) * R + 2 * r, b + 2, 2);
        for (int s = 0; s < 8; ++s) {
          int sc = 0, m = 0;
          scale_min_k4(s, b + 4, sc, m);
          o[(ds + 4) * R + s * R + r] = static_cast<uint8_t>(sc);
          o[(ds + 12) * R + s * R + r] = static_cast<uint8_t>(m);
        }
      });
  return {q5 ? WeightType::kQ5_KPanels : WeightType::kQ4_KPanels, data, nullptr, n, k};
}

// IQ4_XS's blocks (d, scales_h, scales_l[4], qs[128]) into iq4_xs-panels (weights.h).
WeightMatrix pack_iq4_xs_panels(const void* blocks, int64_t n, int64_t k, uint8_t* data) {
  for_each_super_block(
      blocks, n, k, 136, 138, data, [](const uint8_t* b, uint8_t* o, int64_t R, int64_t r) {
        uint16_t scales_h;
        std::memcpy(&scales_h, b + 2, 2);
        for (int ib = 0; ib < 8; ++ib) {
          for (int u = 0; u < 4; ++u)
            std::memcpy(o + ib * 16 * R + u * 4 * R + 4 * r, b + 8 + 16 * ib + 4 * u, 4);
          const int ls =
              ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
          o[130 * R + ib * R + r] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
        }
        std::memcpy(o + 128 * R + 2 * r, b, 2);
      });
  return {WeightType::kIQ4_XSPanels, data, nullptr, n, k};
}

// Q6_K's block (ql[128], qh[64], sc[16], d) into a q6_k-panels super-block of R rows (weights.h).
WeightMatrix pack_q6_k_panels(const void* blocks, int64_t n, int64_t k, uint8_t* data) {
  for_each_super_block(
      blocks, n, k, 210, 210, data, [](const uint8_t* b, uint8_t* o, int64_t R, int64_t r) {
        for (int i = 0; i < 256; ++i) {  // value i's 6 bits, as ggml's dequantize_row_q6_K
          const int half = i / 128, quarter = (i % 128) / 32, l = i % 32;
          const int lo = (b[half * 64 + (quarter % 2) * 32 + l] >> (4 * (quarter / 2))) & 0xF;
          const int hi = (b[128 + half * 32 + l] >> (2 * quarter)) & 3;
          const int j = i / 32, v = i % 32, u = (v % 16) / 4, e = v % 4, t = v / 16;
          uint8_t* blk = o + j * 24 * R;
          blk[u * 4 * R + 4 * r + e] |= static_cast<uint8_t>(lo << (4 * t));
          blk[16 * R + t * 4 * R + 4 * r + e] |= static_cast<uint8_t>(hi << (2 * u));
        }
        std::memcpy(o + 192 * R + 2 * r, b + 208, 2);
        for (int s = 0; s < 16; ++s) o[194 * R + s * R + r] = b[192 + s];
      });
  return {WeightType::kQ6_KPanels, data, nullptr, n, k};
}

// The parts of a q4_k-panels / q6_k-panels super-block: `count` runs of `width` bytes a row, each
// run R rows side by side (so a short panel pads run by run).
struct SuperBlockPart {
  int count, width;
};
constexpr SuperBlockPart kQ4_KRuns[] = {{32, 4}, {2, 2}, {16, 1}};
constexpr SuperBlockPart kQ5_KRuns[] = {{32, 4}, {8, 4}, {2, 2}, {16, 1}};
constexpr SuperBlockPart kIQ4_XSRuns[] = {{32, 4}, {1, 2}, {8, 1}};
constexpr SuperBlockPart kQ6_KRuns[] = {{48, 4}, {1, 2}, {16, 1}};

// Row r of a matrix in one of the super-block panel types (sb_bytes a row per 256 values): its
// panel's first byte, the panel's rows R and r's place rr in it.
struct SuperBlockRow {
  const uint8_t* panel;
  int64_t R, rr;
};
SuperBlockRow super_block_row(const WeightMatrix& w, int64_t r, int64_t sb_bytes) {
  const int64_t p = r / kPanelRows;
  return {static_cast<const uint8_t*>(w.data) + p * kPanelRows * (w.k / 256 * sb_bytes),
          std::min<int64_t>(kPanelRows, w.n - p * kPanelRows), r % kPanelRows};
}

}  // namespace

void WeightMatrix::dequantize_row(int64_t r, float* out) const {
  TF_CHECK(r >= 0 && r < n);
  const uint8_t* row = static_cast<const uint8_t*>(data) + r * row_bytes(type, k);
  switch (type) {
    case WeightType::kF32:
      std::memcpy(out, row, static_cast<size_t>(k) * 4);
      return;
    case WeightType::kF32Panels:
    case WeightType::kF16Panels:
    case WeightType::kBF16Panels: {
      const int64_t first = r / kPanelRows * kPanelRows,
                    rows = std::min<int64_t>(kPanelRows, n - first), at = r - first;
      if (type == WeightType::kF32Panels) {
        const float* panel = static_cast<const float*>(data) + first * k;
        for (int64_t c = 0; c < k; ++c) out[c] = panel[c * rows + at];
      } else {
        const uint16_t* panel = static_cast<const uint16_t*>(data) + first * k;
        const bool f16 = type == WeightType::kF16Panels;
        for (int64_t c = 0; c < k; ++c) {
          const uint16_t h = panel[c * rows + at];
          out[c] = f16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
      }
      return;
    }
    case WeightType::kBF16:
      convert_to_f32(DType::kBF16, row, static_cast<size_t>(k), out);
      return;
    case WeightType::kF16:
      convert_to_f32(DType::kF16, row, static_cast<size_t>(k), out);
      return;
    case WeightType::kI8: {
      const float s = static_cast<const float*>(scales)[r];
      for (int64_t i = 0; i < k; ++i) out[i] = static_cast<float>(static_cast<int8_t>(row[i])) * s;
      return;
    }
    case WeightType::kQ4: {
      const uint16_t* sc = static_cast<const uint16_t*>(scales) + r * (k / kQ4Group);
      for (int64_t g = 0; g < k / kQ4Group; ++g) {
        const float s = f16_to_f32(sc[g]);
        const uint8_t* b = row + g * (kQ4Group / 2);
        for (int i = 0; i < kQ4Group / 2; ++i) {
          out[g * kQ4Group + i] = static_cast<float>((b[i] & 0xF) - 8) * s;
          out[g * kQ4Group + i + 16] = static_cast<float>((b[i] >> 4) - 8) * s;
        }
      }
      return;
    }
    case WeightType::kQ4Panels:
    case WeightType::kQ8_0Panels:
    case WeightType::kI8Panels:
    case WeightType::kIQ4_NLPanels: {
      const bool iq4 = type == WeightType::kIQ4_NLPanels;
      const PanelAt at = panel_at(*this, r / kPanelRows);
      const int64_t R = at.rows, rr = r % kPanelRows, B = panel_block_bytes(type);
      for (int64_t b = 0; b < k / kQ4Group; ++b) {
        const float s = at.row_scales ? at.row_scales[rr] : f16_to_f32(at.scales[b * R + rr]);
        const uint8_t* blk = at.data + b * R * B;
        for (int64_t i = 0; i < B; ++i) {
          const uint8_t v = blk[(i / 4) * 4 * R + 4 * rr + i % 4];
          if (B == 32) {
            out[b * 32 + i] = static_cast<float>(static_cast<int8_t>(v)) * s;
          } else if (iq4) {
            out[b * 32 + i] = static_cast<float>(kIq4nlValues[v & 0xF]) * s;
            out[b * 32 + i + 16] = static_cast<float>(kIq4nlValues[v >> 4]) * s;
          } else {
            out[b * 32 + i] = static_cast<float>((v & 0xF) - 8) * s;
            out[b * 32 + i + 16] = static_cast<float>((v >> 4) - 8) * s;
          }
        }
      }
      return;
    }
    case WeightType::kQ4_KPanels:
    case WeightType::kQ5_KPanels: {
      const bool q5 = type == WeightType::kQ5_KPanels;
      const int64_t sb_bytes = q5 ? 180 : 148;
      const auto [panel, R, rr] = super_block_row(*this, r, sb_bytes);
      for (int64_t sb = 0; sb < k / 256; ++sb) {
        const uint8_t* q = panel + sb * sb_bytes * R;
        const uint8_t* ds = q + (sb_bytes - 20) * R;
        const float d = f16_at(ds + 2 * rr), dmin = f16_at(ds + 2 * R + 2 * rr);
        const uint8_t* sc = ds + 4 * R;
        const uint8_t* mn = sc + 8 * R;
        for (int s = 0; s < 8; ++s) {  // as Q4_K / Q5_K: d sc q - dmin m, in f32
          const float d1 = d * sc[s * R + rr], m1 = dmin * mn[s * R + rr];
          const int64_t j = s / 2, t = s % 2;
          for (int i = 0; i < 32; ++i) {
            const int64_t u = i / 4, e = i % 4;
            const uint8_t v = q[j * 32 * R + u * 4 * R + 4 * rr + e];
            int value = (t == 0 ? v : v >> 4) & 0xF;
            if (q5) value += ((q[128 * R + j * 8 * R + t * 4 * R + 4 * rr + e] >> u) & 1) << 4;
            out[sb * 256 + s * 32 + i] = d1 * value - m1;
          }
        }
      }
      return;
    }
    case WeightType::kIQ4_XSPanels: {
      const auto [panel, R, rr] = super_block_row(*this, r, 138);
      for (int64_t sb = 0; sb < k / 256; ++sb) {
        const uint8_t* o = panel + sb * 138 * R;
        const float d = f16_at(o + 128 * R + 2 * rr);
        for (int ib = 0; ib < 8; ++ib) {  // as IQ4_XS: (d (ls - 32)) T[q], in f32
          const float dl = d * static_cast<int8_t>(o[130 * R + ib * R + rr]);
          for (int i = 0; i < 16; ++i) {
            const uint8_t v = o[ib * 16 * R + (i / 4) * 4 * R + 4 * rr + i % 4];
            out[sb * 256 + ib * 32 + i] = dl * kIq4nlValues[v & 0xF];
            out[sb * 256 + ib * 32 + i + 16] = dl * kIq4nlValues[v >> 4];
          }
        }
      }
      return;
    }
    case WeightType::kQ6_KPanels: {
      const auto [panel, R, rr] = super_block_row(*this, r, 210);
      for (int64_t sb = 0; sb < k / 256; ++sb) {
        const uint8_t* o = panel + sb * 210 * R;
        const float d = f16_at(o + 192 * R + 2 * rr);
        for (int i = 0; i < 256; ++i) {  // as Q6_K: d sc (q - 32), in f32
          const int j = i / 32, v = i % 32, u = (v % 16) / 4, e = v % 4, t = v / 16;
          const uint8_t* blk = o + j * 24 * R;
          const int lo = (blk[u * 4 * R + 4 * rr + e] >> (4 * t)) & 0xF;
          const int hi = (blk[16 * R + t * 4 * R + 4 * rr + e] >> (2 * u)) & 3;
          const int sc = static_cast<int8_t>(o[194 * R + (i / 16) * R + rr]);
          out[sb * 256 + i] = d * sc * ((lo | (hi << 4)) - 32);
        }
      }
      return;
    }
    default:
      dequantize_blocks(type, row, k, out);
      return;
  }
}

void quantize_rows(WeightType t, const float* src, int64_t n, int64_t k, std::vector<uint8_t>& data,
                   std::vector<uint8_t>& scales) {
  if (is_block_type(t) || is_any_panel_type(t))
    fail("packing to {} is not supported; use f32, bf16, f16, int8 or q4", weight_type_name(t));
  if (t == WeightType::kQ4 && k % kQ4Group != 0)
    fail("q4 needs rows of a multiple of {} elements, got {}", kQ4Group, k);
  data.assign(static_cast<size_t>(WeightMatrix::row_bytes(t, k) * n), 0);
  scales.clear();
  switch (t) {
    case WeightType::kF32:
      std::memcpy(data.data(), src, data.size());
      return;
    case WeightType::kBF16:
    case WeightType::kF16: {
      auto* d = reinterpret_cast<uint16_t*>(data.data());
      for (int64_t i = 0; i < n * k; ++i)
        d[i] = t == WeightType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
      return;
    }
    case WeightType::kI8: {
      scales.resize(static_cast<size_t>(n) * 4);
      auto* d = reinterpret_cast<int8_t*>(data.data());
      for (int64_t r = 0; r < n; ++r) {
        const float* row = src + r * k;
        float amax = 0.0f;
        for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(row[i]));
        const float s = amax / 127.0f;
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int64_t i = 0; i < k; ++i) {
          d[r * k + i] = static_cast<int8_t>(std::clamp(std::lrint(row[i] * inv), -127l, 127l));
        }
        std::memcpy(scales.data() + r * 4, &s, 4);
      }
      return;
    }
    case WeightType::kQ4: {
      const int64_t groups = k / kQ4Group;
      scales.resize(static_cast<size_t>(n * groups) * 2);
      auto* sc = reinterpret_cast<uint16_t*>(scales.data());
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t g = 0; g < groups; ++g) {
          const float* x = src + r * k + g * kQ4Group;
          // As llama.cpp's Q4_0: the value of largest magnitude maps to -8 exactly.
          float amax = 0.0f, max = 0.0f;
          for (int i = 0; i < kQ4Group; ++i) {
            if (std::fabs(x[i]) > amax) {
              amax = std::fabs(x[i]);
              max = x[i];
            }
          }
          const uint16_t s16 = f32_to_f16(max / -8.0f);
          const float s = f16_to_f32(s16);  // quantize against the scale as it is stored
          const float inv = s != 0.0f ? 1.0f / s : 0.0f;
          sc[r * groups + g] = s16;
          uint8_t* b = data.data() + r * (k / 2) + g * (kQ4Group / 2);
          for (int i = 0; i < kQ4Group / 2; ++i) {
            const int lo = static_cast<int>(std::clamp(std::lrint(x[i] * inv) + 8, 0l, 15l));
            const int hi = static_cast<int>(std::clamp(std::lrint(x[i + 16] * inv) + 8, 0l, 15l));
            b[i] = static_cast<uint8_t>(lo | (hi << 4));
          }
        }
      }
      return;
    }
    default:  // refused above
      return;
  }
}

void q4_0_to_q4(const void* blocks, int64_t n, int64_t k, uint8_t* data, uint16_t* scales) {
  TF_CHECK(k % kQ4Group == 0);
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t g = 0; g < n * (k / kQ4Group); ++g, b += 18) {
    std::memcpy(scales + g, b, 2);
    std::memcpy(data + g * 16, b + 2, 16);
  }
}

bool has_panel_type(WeightType t) {
  switch (t) {
    case WeightType::kQ4:
    case WeightType::kQ4_0:
    case WeightType::kQ8_0:
    case WeightType::kI8:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
    case WeightType::kQ6_K:
    case WeightType::kIQ4_NL:
    case WeightType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

WeightType panel_type(WeightType t) {
  switch (t) {
    case WeightType::kQ4:
    case WeightType::kQ4_0:
      return WeightType::kQ4Panels;
    case WeightType::kQ8_0:
      return WeightType::kQ8_0Panels;
    case WeightType::kI8:
      return WeightType::kI8Panels;
    case WeightType::kQ4_K:
      return WeightType::kQ4_KPanels;
    case WeightType::kQ5_K:
      return WeightType::kQ5_KPanels;
    case WeightType::kQ6_K:
      return WeightType::kQ6_KPanels;
    case WeightType::kIQ4_NL:
      return WeightType::kIQ4_NLPanels;
    case WeightType::kIQ4_XS:
      return WeightType::kIQ4_XSPanels;
    default:
      TF_CHECK(!"panel_type: q4, Q4_0, Q8_0, int8, Q4_K, Q5_K, Q6_K, IQ4_NL or IQ4_XS expected");
      return t;
  }
}

int64_t panel_scale_bytes(WeightType t, int64_t n, int64_t k) {
  if (t == WeightType::kQ4_KPanels || t == WeightType::kQ5_KPanels ||
      t == WeightType::kQ6_KPanels || t == WeightType::kIQ4_XSPanels)
    return 0;
  return t == WeightType::kI8Panels ? n * 4 : n * (k / kQ4Group) * 2;
}

WeightMatrix pack_panels(WeightType t, const void* src_data, const void* src_scales, int64_t n,
                         int64_t k, uint8_t* data, void* scales) {
  TF_CHECK(k % kQ4Group == 0);
  if (t == WeightType::kQ4_K || t == WeightType::kQ5_K)
    return pack_k45_panels(t == WeightType::kQ5_K, src_data, n, k, data);
  if (t == WeightType::kQ6_K) return pack_q6_k_panels(src_data, n, k, data);
  if (t == WeightType::kIQ4_XS) return pack_iq4_xs_panels(src_data, n, k, data);
  const WeightMatrix out{panel_type(t), data, scales, n, k};
  const int64_t kb = k / kQ4Group, B = panel_block_bytes(out.type);
  const auto* src = static_cast<const uint8_t*>(src_data);
  if (t == WeightType::kI8) std::memcpy(scales, src_scales, static_cast<size_t>(n) * 4);
  // Row r's block b: its B quant bytes (and, but for int8, its f16 scale) as the source has them.
  auto source = [&](int64_t r, int64_t b, uint16_t& d) -> const uint8_t* {
    if (t == WeightType::kI8) return src + r * k + b * 32;
    if (t == WeightType::kQ4) {  // (scales read bytewise: straight from a file, any alignment)
      std::memcpy(&d, static_cast<const uint8_t*>(src_scales) + (r * kb + b) * 2, 2);
      return src + r * (k / 2) + b * 16;
    }
    const int64_t bytes = t == WeightType::kQ8_0 ? 34 : 18;  // Q4_0's and IQ4_NL's: 18
    const uint8_t* blk = src + (r * kb + b) * bytes;
    std::memcpy(&d, blk, 2);
    return blk + 2;
  };
  for (int64_t p = 0; p * kPanelRows < n; ++p) {
    const PanelAt at = panel_at(out, p);
    auto* pd = const_cast<uint8_t*>(at.data);
    auto* ps = const_cast<uint16_t*>(at.scales);
    const int64_t R = at.rows;
    uint16_t unused = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t b = 0; b < kb; ++b) {
        const uint8_t* q = source(p * kPanelRows + r, b, ps ? ps[b * R + r] : unused);
        for (int64_t u = 0; u < B / 4; ++u)
          std::memcpy(pd + b * R * B + u * 4 * R + 4 * r, q + 4 * u, 4);
      }
  }
  return out;
}

void panels_to_rows(const WeightMatrix& w, uint8_t* data, void* scales) {
  TF_CHECK(w.type == WeightType::kQ4Panels || w.type == WeightType::kI8Panels);
  const int64_t kb = w.k / kQ4Group, B = panel_block_bytes(w.type);
  const int64_t row_bytes = WeightMatrix::row_bytes(w.type, w.k);
  if (w.type == WeightType::kI8Panels) std::memcpy(scales, w.scales, static_cast<size_t>(w.n) * 4);
  for (int64_t p = 0; p * kPanelRows < w.n; ++p) {
    const PanelAt at = panel_at(w, p);
    const int64_t R = at.rows;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t row = p * kPanelRows + r;
        if (at.scales != nullptr)
          static_cast<uint16_t*>(scales)[row * kb + b] = at.scales[b * R + r];
        for (int64_t u = 0; u < B / 4; ++u)
          std::memcpy(data + row * row_bytes + b * B + 4 * u,
                      at.data + b * R * B + u * 4 * R + 4 * r, 4);
      }
  }
}

WholePanel whole_panel(const WeightMatrix& w, int64_t p, PanelPadding& pad) {
  const int64_t j = p * kPanelRows, kb = w.k / kQ4Group;
  const int64_t row_bytes = WeightMatrix::row_bytes(w.type, w.k);
  if (w.n - j < kPanelRows) {
    pad.data.resize(static_cast<size_t>(row_bytes * kPanelRows));
    pad.scales.resize(static_cast<size_t>(kb * kPanelRows));
    pad_panel(w, p, pad.data.data(), pad.scales.data());
    return {pad.data.data(), pad.scales.data()};
  }
  const uint8_t* data = static_cast<const uint8_t*>(w.data) + j * row_bytes;
  if (w.scales == nullptr) return {data, nullptr};  // the K-quants' panels
  if (w.type == WeightType::kI8Panels) return {data, static_cast<const float*>(w.scales) + j};
  return {data, static_cast<const uint16_t*>(w.scales) + j * kb};
}

void pad_panel(const WeightMatrix& w, int64_t p, uint8_t* data, void* scales) {
  TF_CHECK(is_panel_type(w.type));
  if (w.type == WeightType::kQ4_KPanels || w.type == WeightType::kQ5_KPanels ||
      w.type == WeightType::kQ6_KPanels || w.type == WeightType::kIQ4_XSPanels) {
    // Each super-block's parts from R rows to 16, run by run.
    using Parts = std::span<const SuperBlockPart>;
    const Parts parts = w.type == WeightType::kQ4_KPanels   ? Parts(kQ4_KRuns)
                        : w.type == WeightType::kQ5_KPanels ? Parts(kQ5_KRuns)
                        : w.type == WeightType::kQ6_KPanels ? Parts(kQ6_KRuns)
                                                            : Parts(kIQ4_XSRuns);
    const int64_t R = std::min<int64_t>(kPanelRows, w.n - p * kPanelRows);
    const int64_t sb_bytes = WeightMatrix::row_bytes(w.type, 256);  // a row's per super-block
    const uint8_t* src =
        static_cast<const uint8_t*>(w.data) + p * kPanelRows * (w.k / 256 * sb_bytes);
    std::memset(data, 0, static_cast<size_t>(w.k / 256 * sb_bytes * kPanelRows));
    for (int64_t sb = 0; sb < w.k / 256; ++sb) {
      const uint8_t* s = src + sb * sb_bytes * R;
      uint8_t* o = data + sb * sb_bytes * kPanelRows;
      for (const SuperBlockPart& part : parts)
        for (int u = 0; u < part.count; ++u) {
          std::memcpy(o, s, static_cast<size_t>(part.width * R));
          o += part.width * kPanelRows;
          s += part.width * R;
        }
    }
    return;
  }
  const PanelAt at = panel_at(w, p);
  const int64_t kb = w.k / kQ4Group, R = at.rows, B = panel_block_bytes(w.type);
  std::memset(data, 0, static_cast<size_t>(kb * kPanelRows * B));
  if (at.row_scales != nullptr) {
    auto* s = static_cast<float*>(scales);
    for (int64_t r = 0; r < kPanelRows; ++r) s[r] = r < R ? at.row_scales[r] : 0.0f;
  } else {
    std::memset(scales, 0, static_cast<size_t>(kb * kPanelRows) * sizeof(uint16_t));
  }
  for (int64_t b = 0; b < kb; ++b)
    for (int64_t r = 0; r < R; ++r) {
      if (at.scales != nullptr)
        static_cast<uint16_t*>(scales)[b * kPanelRows + r] = at.scales[b * R + r];
      for (int64_t u = 0; u < B / 4; ++u)
        std::memcpy(data + b * kPanelRows * B + u * 4 * kPanelRows + 4 * r,
                    at.data + b * R * B + u * 4 * R + 4 * r, 4);
    }
}

namespace {

// Rows [n, k] of T (or their transpose [k, n]) as panels of 16 rows, column by column.
template <class T>
void pack_columns(const T* src, int64_t n, int64_t k, T* data, bool transposed) {
  for (int64_t first = 0; first < n; first += kPanelRows) {
    const int64_t r_count = std::min<int64_t>(kPanelRows, n - first);
    T* panel = data + first * k;
    if (transposed) {  // src [k, n]: a panel's column is r_count elements of src's row c
      for (int64_t c = 0; c < k; ++c)
        std::memcpy(panel + c * r_count, src + c * n + first, sizeof(T) * r_count);
      continue;
    }
    // Column by column: the writes sequential, the reads r_count sequential streams.
    const T* rows = src + first * k;
    for (int64_t c = 0; c < k; ++c)
      for (int64_t r = 0; r < r_count; ++r) panel[c * r_count + r] = rows[r * k + c];
  }
}

}  // namespace

WeightMatrix pack_f32_panels(const float* src, int64_t n, int64_t k, float* data, bool transposed) {
  pack_columns(src, n, k, data, transposed);
  return {WeightType::kF32Panels, data, nullptr, n, k};
}

WeightMatrix pack_half_panels(WeightType t, const uint16_t* src, int64_t n, int64_t k,
                              uint16_t* data) {
  TF_CHECK(t == WeightType::kF16 || t == WeightType::kBF16);
  pack_columns(src, n, k, data, false);
  return {float_panel_type(t), data, nullptr, n, k};
}

WeightType float_panel_type(WeightType t) {
  switch (t) {
    case WeightType::kF32:
      return WeightType::kF32Panels;
    case WeightType::kF16:
      return WeightType::kF16Panels;
    case WeightType::kBF16:
      return WeightType::kBF16Panels;
    default:
      TF_CHECK(!"not f32, f16 or bf16");
  }
  return t;
}

}  // namespace tf::kernels
