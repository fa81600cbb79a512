#pragma once
// AMX tile kernels (Intel Sapphire Rapids and later: amx_tile, amx_bf16, amx_int8), the
// TileKernels of the "amx" table (isa.h).
//
// bf16 weights: tdpbf16ps, each instruction a 16 x 16 x 32 block of multiply-adds into f32 tile
// accumulators. The weights stay in their row-major [n, k] layout (a tile: 16 weight rows x 32
// values, loaded with the row stride), so every other path reads them as before. The
// activations are rounded to bf16 and laid out once per call in tdpbf16ps's B-operand form, one
// 1 KiB block per 16 rows (tokens) x 32 values of k:
//   block (mb, kb) at element (mb * k_blocks + kb) * 512; in it, element
//   r * 32 + 2 * t + e  =  bf16(x[mb * 16 + t][kb * 32 + 2 * r + e])   (r, t < 16; e < 2),
// zero past m and past k. Each output is the tile's f32 sum over k in blocks of 32, in order.
//
// The quantized types take the tiles as panels (weights.h; amx_matmul_cols_panels below).
//
// A row's result is the same sequence of operations for whatever m and whichever thread, so
// batch invariance holds (matmul takes the tiles for every m).

#include <cstdint>

#include "kernels/isa.h"
#include "kernels/q8.h"
#include "kernels/weights.h"

namespace tf::kernels {

#if defined(__x86_64__)
// Asks Linux for the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM, once per process); false
// where the kernel refuses (before 5.16) or the CPU lacks AMX. Must succeed before any tile use.
// (dispatch.cc, built for any x86-64; the kernels are in amx.cc, built with the AMX flags and
// reached only through the AMX table.)
bool amx_enable();

const TileKernels& amx_tile_kernels();

// The panel types (weights.h) on tiles: tdpbssd (Q4_K: tdpbsud) per block of 32 with the tokens'
// quants as the A operand (BlockQ8Rows::tq: 16 tokens x 32 per tile and block) and the panel's
// block as the B operand (8 rows of 16 weight rows x 4 values: Q8_0's and int8's straight from
// the panel, q4's and Q4_K's unpacked once per panel), then the int32 tile scaled per block into
// f32 sums. Activations without that layout (matmul gives it from TileKernels::panel_tokens
// tokens) take the VNNI panel kernel of the avx512-bf16 table, whose integers and f32 steps are
// the same, so the bits do not depend on m. (IsaKernels::matmul_cols_panels of the amx table.)
void amx_matmul_cols_panels(const BlockQ8Rows& x, const WeightMatrix& w, int64_t n_begin,
                            int64_t n_end, const float* bias, float* y, int64_t ldy,
                            bool accumulate);
#endif

}  // namespace tf::kernels
