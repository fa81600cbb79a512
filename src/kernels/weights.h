#pragma once
// A weight matrix [n rows, k columns] as the matmul kernels read it, in one of the compute
// dtypes. Every type widens to f32 in registers and multiplies f32 activations, so one code path
// serves every M and a row's reduction order never depends on the batch (see matmul.h).
//
// Layouts (rows contiguous, row j of k elements):
//   f32, bf16, f16: k elements.
//   i8:  k int8 values q; w = q * scale[j] (symmetric, one scale per output row).
//   q4:  k / 32 groups of 16 bytes; byte b of a group holds element b in its low nibble and
//        element b + 16 in its high nibble; w = (nibble - 8) * scale[j * k / 32 + g], scales f16
//        (4.5 bits per weight, as llama.cpp's Q4_0).
//   ggml block formats (q8_0 ... iq4_xs, as GGUF files store them, read in place): each row is
//        k / block_size(t) blocks of block_bytes(t) bytes, scales inside the blocks (layouts in
//        ggml_quants.h). k must be a multiple of the block size.
//   q4-panels, q8_0-panels, i8-panels: q4 (or Q4_0), Q8_0 with the scales apart (f16, as q4's),
//        and int8 (its scales per row, as i8's), with the rows interleaved in panels of 16, in the
//        bytes those rows take row-major (so a panel of rows [16P, 16P + R) starts at
//        data + 16P * row_bytes and scales + 16P * k / 32 (i8-panels: scales + 16P); R = 16 but
//        for a matrix's last panel, R = n - 16P). Per block b of 32 values of a panel:
//          scales[b * R + r]                    the f16 scale of row 16P + r (i8-panels: [r]),
//          bytes [b * R * B + u * 4R + 4r + e]  byte 4u + e of that row's block (e < 4),
//        where a row's block is B bytes: Q8_0's or int8's 32 quants (B = 32, w = q * d), or q4's
//        16 bytes (B = 16: byte i holds value i in its low nibble and i + 16 in its high,
//        w = (q - 8) d).
//   q4_k-panels: Q4_K in panels of 16 rows, per super-block of 256 values and panel of R rows
//        148R bytes: the nibbles as q4-panels' but per 64 values (byte j * 32R + u * 4R + 4r + e
//        is byte 32j + 4u + e of the row's qs: low nibble value 64j + 4u + e, high nibble value
//        64j + 32 + 4u + e), then d[R] and dmin[R] (f16), then the 6-bit scales sc[8][R] and
//        minima m[8][R] unpacked to bytes (so 148 bytes a row per 256 values, Q4_K's 144 + 4:
//        w = d sc q - dmin m per sub-block of 32). No separate scales.
//   iq4_nl-panels: IQ4_NL as q4-panels (its nibbles and f16 scales in q4-panels' places; the
//        nibbles index ggml_quants.h's kIq4nlValues: w = T[q] d).
//   iq4_xs-panels: IQ4_XS in panels of 16 rows, per super-block of 256 values and panel of R rows
//        138R bytes (IQ4_XS's 136 + 2): the 8 blocks' nibbles as iq4_nl-panels' (block j at
//        j * 16R), then d[R] (f16) at 128R, then the blocks' scales sc[8][R] (int8, IQ4_XS's
//        6-bit scale - 32) at 130R: w = d sc T[q].
//   q5_k-panels: Q5_K in panels of 16 rows, per super-block of 256 values and panel of R rows
//        180R bytes: the low 4 bits as q4_k-panels' nibbles (128R), then the fifth bits (byte
//        128R + j * 8R + t * 4R + 4r + e, bit u: value 64j + 32t + 4u + e), then d, dmin, sc and
//        m as q4_k-panels' (52R; Q5_K's 176 bytes a row + 4, its 6-bit scales unpacked).
//   q6_k-panels: Q6_K in panels of 16 rows, per super-block of 256 values and panel of R rows
//        210R bytes (Q6_K's own size): per block j < 8 of 32 values, 24R bytes at j * 24R: the
//        low 4 bits of the 6-bit quants q as q4-panels' nibbles (byte u * 4R + 4r + e: value
//        4u + e low, 16 + 4u + e high, u < 4), then their high 2 bits, 2 bits a value (byte
//        16R + t * 4R + 4r + e, bits 2u..2u+1: value 16t + 4u + e); then d[R] (f16) at 192R and
//        the int8 scales sc[16][R] at 194R (w = d sc (q - 32) per sub-block of 16).
//        So each 64 bytes hold 4 consecutive values of each of 16 rows: the B operand of an AMX
//        int8 tile with the weight rows as its columns, and for one token, vpdpbusd against the
//        token's 4 values broadcast leaves every lane one row's sum with no reduction. The
//        kernels' own layout (pack_panels), chosen at load where the table has panel kernels.
//   f32-panels: f32 in panels of 16 rows, column by column: panel P (rows [16P, 16P + R), R = 16
//        but for a matrix's last panel) at data + 16P * k floats holds element (16P + r, c) at
//        c * R + r. The same size as f32 rows; the f32 GEMM's layout (pack_f32_panels), chosen at
//        load where the table's f32_panels says it pays.
//   f16-panels, bf16-panels: f16 / bf16 laid out as f32-panels (2 bytes an element), widened to
//        f32 by the same GEMM.

#include <cstdint>
#include <string_view>
#include <vector>

namespace tf::kernels {

enum class WeightType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kI8,
  kQ4,
  kQ4Panels,      // q4 in panels of 16 rows (above)
  kQ8_0Panels,    // Q8_0 in panels of 16 rows (above)
  kI8Panels,      // int8 in panels of 16 rows (above)
  kQ4_KPanels,    // Q4_K in panels of 16 rows (above)
  kQ5_KPanels,    // Q5_K in panels of 16 rows (above)
  kIQ4_NLPanels,  // IQ4_NL in panels of 16 rows (above)
  kIQ4_XSPanels,  // IQ4_XS in panels of 16 rows (above)
  kQ6_KPanels,    // Q6_K in panels of 16 rows (above)
  kF32Panels,     // f32 in panels of 16 rows, column by column (above)
  kF16Panels,     // f16 likewise
  kBF16Panels,    // bf16 likewise
  // ggml's block formats, as GGUF stores them.
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kIQ4_NL,
  kIQ4_XS,
  kMXFP4,
};
inline constexpr WeightType kBlockTypes[] = {
    WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,   WeightType::kQ5_0,
    WeightType::kQ5_1, WeightType::kQ2_K, WeightType::kQ3_K,   WeightType::kQ4_K,
    WeightType::kQ5_K, WeightType::kQ6_K, WeightType::kIQ4_NL, WeightType::kIQ4_XS,
    WeightType::kMXFP4};

// Whether t is one of ggml's block formats (scales inside the rows, read by the block kernels).
constexpr bool is_block_type(WeightType t) {
  return t >= WeightType::kQ8_0;
}
// Values per block (32, or 256 for the K-quants and IQ4_XS) and bytes per block; 1 and the
// element size for the other types.
int64_t block_size(WeightType t);
int64_t block_bytes(WeightType t);

inline constexpr int kQ4Group = 32;
inline constexpr int kPanelRows = 16;

constexpr bool is_panel_type(WeightType t) {
  return t == WeightType::kQ4Panels || t == WeightType::kQ8_0Panels || t == WeightType::kI8Panels ||
         t == WeightType::kQ4_KPanels || t == WeightType::kQ5_KPanels ||
         t == WeightType::kQ6_KPanels || t == WeightType::kIQ4_NLPanels ||
         t == WeightType::kIQ4_XSPanels;
}
// The quantized panel types above (int8 dot products) or f32-, f16- and bf16-panels (the f32
// outer-product GEMM: is_float_panel_type): all of them
// take whole panels only (WeightMatrix::rows).
constexpr bool is_float_panel_type(WeightType t) {
  return t == WeightType::kF32Panels || t == WeightType::kF16Panels || t == WeightType::kBF16Panels;
}
constexpr bool is_any_panel_type(WeightType t) {
  return is_panel_type(t) || is_float_panel_type(t);
}

// "f32", "bf16", "f16", "int8", "q4", and ggml's names in lower case ("q4_k", "iq4_xs").
std::string_view weight_type_name(WeightType t);
// Parses those names (and "int8"'s alias "i8"); throws Error naming the choices otherwise.
WeightType parse_weight_type(std::string_view name);

struct WeightMatrix {
  WeightType type = WeightType::kF32;
  const void* data = nullptr;
  // i8, i8-panels: float[n]; q4 and the other panel types: uint16_t (f16) [n * k / 32]; else none
  const void* scales = nullptr;
  int64_t n = 0, k = 0;

  // Bytes of one row's data (not counting scales).
  static int64_t row_bytes(WeightType t, int64_t k);
  // Bytes of all rows plus scales.
  int64_t bytes() const;
  // Rows [first, first + count) as a matrix of their own (no copy). The panel types take whole
  // panels only: first % 16 == 0, and count % 16 == 0 unless the range ends at n.
  WeightMatrix rows(int64_t first, int64_t count) const;
  // Row r widened to f32 (an embedding lookup).
  void dequantize_row(int64_t r, float* out) const;
};

// Packs f32 rows [n, k] into type t: data gets row_bytes(t, k) * n bytes, scales the scales
// (floats for i8, f16 bits for q4; empty otherwise). q4 needs k % 32 == 0 (throws otherwise).
// Rounding: bf16/f16 round to nearest even; i8 scale = max|w| / 127; q4 scale = max|w| / 7.
void quantize_rows(WeightType t, const float* src, int64_t n, int64_t k, std::vector<uint8_t>& data,
                   std::vector<uint8_t>& scales);

// ggml's Q4_0 blocks (f16 d, then 16 bytes of nibbles: element b low, b + 16 high, w = d (q - 8))
// of n rows of k are exactly q4 with the scales kept apart: the nibbles to data (n * k / 2 bytes),
// the scales to scales (n * k / 32 f16). Lossless, the same size; k % 32 == 0.
void q4_0_to_q4(const void* blocks, int64_t n, int64_t k, uint8_t* data, uint16_t* scales);

// Whether weights of type t have a panel layout: q4, Q4_0, Q8_0, int8, Q4_K, Q5_K, Q6_K, IQ4_NL
// and IQ4_XS do.
bool has_panel_type(WeightType t);
// The panel type of such weights.
WeightType panel_type(WeightType t);
// Bytes of the scales of n rows of k of a panel type (as of its source type).
int64_t panel_scale_bytes(WeightType t, int64_t n, int64_t k);
// Lays out n rows of k (k % 32 == 0; Q4_K: % 256) of q4 or int8 (src_data, src_scales), Q4_0,
// Q8_0 or Q4_K blocks
// (src_data; src_scales unused) in panel_type(t)'s layout: data gets row_bytes * n bytes, scales
// panel_scale_bytes. Lossless: dequantize_row gives the source's values.
WeightMatrix pack_panels(WeightType t, const void* src_data, const void* src_scales, int64_t n,
                         int64_t k, uint8_t* data, void* scales);
// The inverse for q4-panels and i8-panels: q4 / int8 rows (data k / 2 or k bytes a row, scales as
// that type's).
void panels_to_rows(const WeightMatrix& w, uint8_t* data, void* scales);
// Panel p of w (p < ceil(n / 16)) as a whole panel of 16 rows in `data` (k / 32 blocks of
// 16 * B bytes) and `scales` (k / 32 x 16 f16, or i8-panels' 16 floats): a short last panel padded
// with zero bytes and scales. The kernels read a short panel through this, so a row's arithmetic
// is the same in any panel.
void pad_panel(const WeightMatrix& w, int64_t p, uint8_t* data, void* scales);
// Panel p of w as a whole panel of 16 rows, as the kernels read it: its bytes and scales
// (nullptr for the K-quants' panels, which hold their own) where they lie, or for a short last
// panel, pad_panel's copies in `pad`.
struct WholePanel {
  const uint8_t* data;
  const void* scales;
};
struct PanelPadding {
  std::vector<uint8_t> data;
  std::vector<uint32_t> scales;  // 4 bytes each: room for f16 [k / 32][16] and i8's 16 floats
};
WholePanel whole_panel(const WeightMatrix& w, int64_t p, PanelPadding& pad);

// f32 rows [n, k] (or with `transposed`, their transpose [k, n]) as f32-panels (data: n * k
// floats). Lossless; dequantize_row gives the rows back.
WeightMatrix pack_f32_panels(const float* src, int64_t n, int64_t k, float* data,
                             bool transposed = false);
// f16 or bf16 rows [n, k] (t: kF16 or kBF16) as f16- / bf16-panels (data: n * k elements).
WeightMatrix pack_half_panels(WeightType t, const uint16_t* src, int64_t n, int64_t k,
                              uint16_t* data);
// The float panel type of f32, f16 or bf16.
WeightType float_panel_type(WeightType t);

}  // namespace tf::kernels
