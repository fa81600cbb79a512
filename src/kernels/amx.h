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
// Q8_0 weights: tdpbssd (int8 x int8 into int32) one block of 32 at a time: 16 weight rows x 32
// quants (straight from the Q8_0 blocks, with the rows' stride) times 16 tokens' quants of the
// same block, then the int32 products scaled by the weight's and the activation's scale and
// summed in f32, block after block. One token (decode) takes AVX-512 VNNI instead, with each
// block's int32 product exact too and the same f32 steps, so its bits are the tiles'. The
// activations are quantized per block of 32 as Q8_0 (q8.h: quantize_q8_block32, scale = max|x| /
// 127) and laid out per 16 tokens x 32 values:
//   block (mb, kb) at byte (mb * k_blocks + kb) * 512: byte r * 64 + 4 * t + e =
//   q(x[mb * 16 + t][kb * 32 + 4 * r + e])   (r < 8, t < 16, e < 4),
// then the scales as floats [m_blocks][k_blocks][16]; zero past m.
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

// The panel types (weights.h) on tiles: tdpbssd per block of 32 with the tokens' quants as the A
// operand (16 tokens x 32, copied per tile and block from BlockQ8Rows) and the panel's block as
// the B operand (8 rows of 16 weight rows x 4 values: Q8_0's and int8's straight from the panel,
// q4's unpacked once per panel to signed nibble - 8), then the int32 tile scaled per block into
// f32 sums. Few tokens take
// the VNNI panel kernel of the avx512-bf16 table, whose integers and f32 steps are the same, so
// the bits do not depend on m. (IsaKernels::matmul_cols_panels of the amx table.)
void amx_matmul_cols_panels(const BlockQ8Rows& x, const WeightMatrix& w, int64_t n_begin,
                            int64_t n_end, const float* bias, float* y, int64_t ldy,
                            bool accumulate);
#endif

}  // namespace tf::kernels
