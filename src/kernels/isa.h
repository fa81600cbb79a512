#pragma once
// The table of ISA-specific kernel bodies. Each table is compiled from the same source
// (isa_impl.inc) with different target flags; dispatch picks one at run time from cpu_features().

#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/q8.h"
#include "kernels/weights.h"

namespace tf::kernels {

// Kernels on matrix tiles (amx.h), for the weight types takes() accepts (matmul_cols: the
// unquantized ones; the panel types through IsaKernels::matmul_cols_panels). Their activations are
// laid out once per call (packed_bytes, pack_rows over ranges of rows, in parallel) in the
// tiles' operand layout for that weight type, and the columns are split in groups of
// col_granule (the tiles' rows), so that a column's grouping, and with it its bits, never depends
// on the threads. matmul takes them for every m, so a row's result never depends on its batch.
struct TileKernels {
  bool (*takes)(WeightType t, int64_t k);
  int64_t (*packed_bytes)(WeightType t, int64_t m, int64_t k);
  void (*pack_rows)(WeightType t, const float* x, int64_t m, int64_t k, int64_t i0, int64_t i1,
                    uint8_t* out);
  void (*matmul_cols)(const uint8_t* x, int64_t m, int64_t k, const WeightMatrix& w,
                      int64_t n_begin, int64_t n_end, const float* bias, float* y, int64_t ldy,
                      bool accumulate);
  int col_granule;
  // Tokens from which the panel types takes() accepts take the tiles; matmul then lays the
  // activations out for them (prepare_block_activations' `tiles`), and without that layout the
  // table's panel kernel takes its VNNI form.
  int64_t panel_tokens;
};

struct IsaKernels {
  const char* name;
  // y[i, j] = dot(x[i, :], w[j, :]) (+ bias[j]) for i < m and j in [n_begin, n_end), or with
  // accumulate y[i, j] += that sum (a residual add fused into the epilogue; the same arithmetic
  // as a separate add). x is [m, k] with row stride k, w is [n, k] of any WeightType, y has row
  // stride ldy.
  void (*matmul_cols)(const float* x, int64_t m, int64_t k, const WeightMatrix& w, int64_t n_begin,
                      int64_t n_end, const float* bias, float* y, int64_t ldy, bool accumulate);
  // iters x 8 vector multiply-adds from registers (for `tokenflow bench --roofline`).
  float (*fma_peak)(int64_t iters);
  // The sum of n floats read in order with 8 independent vector adds, each 64-byte line fetched
  // `ahead` bytes in advance (0: left to the hardware prefetchers), for the read-bandwidth
  // patterns of `tokenflow bench --roofline`.
  float (*read_peak)(const float* p, int64_t n, int64_t ahead);
  int vec_width;  // floats per vector
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);  // y += a * x
  // Up to kMaxAttentionQueries queries of one sequence (see attend_queries in attention.h).
  void (*attend_queries)(const float* const* q, const int64_t* n_ctx, int n_q,
                         const PagedKvLayer& kv, const int32_t* block_table, int kv_head,
                         int head_dim, const AttentionOpts& opts, float* const* out);
  // ggml block-format weights (weights.h: is_block_type) times f32 activations, as matmul_cols;
  // every table has one.
  void (*matmul_cols_blocks)(const float* x, int64_t m, int64_t k, const WeightMatrix& w,
                             int64_t n_begin, int64_t n_end, const float* bias, float* y,
                             int64_t ldy, bool accumulate);
  // int8, q4, Q8_0 or Q4_K-Q6_K weights (k % 64 == 0) times activations quantized by
  // quantize_activations (q8.h) with the offset q8_offset(w.type); nullptr where the ISA has no
  // int8 dot product.
  void (*matmul_cols_q8)(const QuantizedRows& x, const WeightMatrix& w, int64_t n_begin,
                         int64_t n_end, const float* bias, float* y, int64_t ldy, bool accumulate);
  // bf16 weights times activations rounded to bf16 (x: [m, k] bf16 bits); nullptr where the ISA
  // has no bf16 dot product.
  void (*matmul_cols_bf16)(const uint16_t* x, int64_t m, int64_t k, const WeightMatrix& w,
                           int64_t n_begin, int64_t n_end, const float* bias, float* y, int64_t ldy,
                           bool accumulate);
  // ggml's block formats, int8 and q4 weights times activations quantized per block of 32
  // (q8.h: BlockQ8Rows), with int8 dot products; nullptr where the table widens those weights to
  // f32 instead (matmul_cols_blocks, matmul_cols). Where set, matmul takes it for every m, so a
  // row's result never depends on its batch.
  void (*matmul_cols_blocks_q8)(const BlockQ8Rows& x, const WeightMatrix& w, int64_t n_begin,
                                int64_t n_end, const float* bias, float* y, int64_t ldy,
                                bool accumulate);
  // Matrix tiles (AMX) for the weight types tiles->takes: nullptr on every table but the AMX one.
  const TileKernels* tiles;
  // The panel types (weights.h: q4-, q8_0-, i8-, q4_k-, q5_k-, q6_k-, iq4_nl-, iq4_xs-panels)
  // times activations quantized per block of 32 (BlockQ8Rows): each block's (Q6_K: sub-block's)
  // product exact in int32, then fma(float(product), dx * dw, sum) block after block, so every
  // path, table and m gives a row the same bits. n_begin a multiple of 16, n_end too or w.n.
  // nullptr where the table has none (portable, avx512 without VNNI: the loader then keeps the rows
  // as they are).
  void (*matmul_cols_panels)(const BlockQ8Rows& x, const WeightMatrix& w, int64_t n_begin,
                             int64_t n_end, const float* bias, float* y, int64_t ldy,
                             bool accumulate);
  // Whether the loader lays f32 (f16, bf16) weights out as f32- (f16-, bf16-) panels for this
  // table (where its outer-product GEMM was measured faster than the row-major dot products).
  // Every table's matmul_cols takes them.
  bool f32_panels;
  // gate[i] = silu(gate[i]) * up[i], and x[i] = gelu_tanh(x[i]) (ops.h): a vector exp where the
  // table has one, each element's arithmetic the same wherever it sits in a row.
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  void (*gelu_tanh)(float* x, int64_t n);
  // x[i] = gelu_erf(x[i]) (ops.h; erf by Abramowitz and Stegun 7.1.26, within 1.5e-7), and
  // x[i] = e^(x[i] - shift) for scores <= shift returning their sum (attention's softmax).
  void (*gelu_erf)(float* x, int64_t n);
  float (*exp_shifted_sum)(float* x, int64_t n, float shift);
  // Whether attend_queries quantizes the queries to int8 against a q8_0 cache (int8 dot products
  // for the scores: the AVX-512 VNNI tables), as the cache's rows are (isa_attention.inc).
  bool int8_attention_scores;
};

extern const IsaKernels kPortableKernels;
#if defined(__x86_64__)
extern const IsaKernels kAvx2Kernels;
extern const IsaKernels kAvx2VnniKernels;  // AVX2 + AVX-VNNI (vpdpbusd on 256 bits)
extern const IsaKernels kAvx512Kernels;
extern const IsaKernels kAvx512VnniKernels;  // AVX-512 + VNNI: int8 dot products
extern const IsaKernels kAvx512Bf16Kernels;  // AVX-512 + VNNI + BF16: bf16 dot products too
// kAvx512Bf16Kernels with AMX tiles (amx.h: bf16 weights, and the panel types); listed by
// supported_tables() only where the CPU has amx_tile + amx_bf16 and Linux grants the tile state.
const IsaKernels& amx_kernels();
#endif

// Every table this CPU supports (TOKENFLOW_ISA can cap it), from portable to the best.
std::vector<const IsaKernels*> supported_tables();
// The best of them, chosen once.
const IsaKernels& isa();
// Whether weights go in panels (weights.h) at load: isa() has panel kernels and TOKENFLOW_PANELS
// is not "0" (the switch that lets a benchmark compare the row-major kernels in one binary).
bool use_weight_panels();
// Whether weights of type t (f32, f16 or bf16) go in float panels (weights.h: f32-panels) at
// load: isa().f32_panels, TOKENFLOW_PANELS not "0", and for bf16 no bf16 dot products in the
// table (those are faster than widening it).
bool use_float_panels(WeightType t);

}  // namespace tf::kernels
