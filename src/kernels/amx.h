#pragma once
// AMX tile kernels (Intel Sapphire Rapids and later: amx_tile + amx_bf16). bf16 weights times
// activations rounded to bf16 with tdpbf16ps: each instruction a 16 x 16 x 32 block of
// multiply-adds into f32 tile accumulators.
//
// The weights stay in their row-major [n, k] bf16 layout (one tile: 16 weight rows x 32 values,
// loaded with the row stride), so every other path reads them as before. The activations are
// laid out once per call in tdpbf16ps's "VNNI" B-operand form, one 1 KiB block per 16 rows
// (tokens) x 32 values of k:
//   block (mb, kb) at uint16 offset (mb * k_blocks + kb) * 512; in it, element
//   r * 32 + 2 * t + e  =  bf16(x[mb * 16 + t][kb * 32 + 2 * r + e])   (r, t < 16; e < 2),
// zero past m and past k. A tile's products are C[weight row][token], written transposed to y.
//
// Each output is a sum over k in blocks of 32, in order, for whatever m and whichever thread:
// matmul takes this path for every m where the table has it, and splits the columns in groups
// of 16 (IsaKernels::col_granule), so a row's result never depends on its batch or the threads.

#include <cstdint>

#include "kernels/weights.h"

namespace tf::kernels {

#if defined(__x86_64__)
// Asks Linux for the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM, once per process); false
// where the kernel refuses (before 5.16) or the CPU lacks AMX. Must succeed before any tile use.
// (dispatch.cc, built for any x86-64; the rest is in amx.cc, built with the AMX flags and called
// only through the AMX table.)
bool amx_enable();

// uint16 elements of the packed activations of m rows of k.
int64_t amx_packed_bf16_size(int64_t m, int64_t k);
// Rounds rows [i0, i1) of x ([m, k] f32) to bf16 into the packed layout above; the call with
// i1 == m also zeroes the padding rows of the last block (k's padding is written by each row).
void amx_pack_bf16_rows(const float* x, int64_t m, int64_t k, int64_t i0, int64_t i1,
                        uint16_t* out);

// y[i, j] (+)= dot(x[i, :], w[j, :]) + bias[j] for i < m, j in [n_begin, n_end); x packed by
// amx_pack_bf16_rows; n_begin a multiple of 16. The IsaKernels::matmul_cols_bf16 of the AMX
// table.
void amx_matmul_cols_bf16(const uint16_t* x, int64_t m, int64_t k, const WeightMatrix& w,
                          int64_t n_begin, int64_t n_end, const float* bias, float* y, int64_t ldy,
                          bool accumulate);
#endif

}  // namespace tf::kernels
