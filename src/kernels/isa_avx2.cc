// AVX2 + FMA build of the kernel bodies; this file is compiled with -mavx2 -mfma -mf16c.
#define TF_ISA_NAMESPACE avx2
#define TF_ISA_NAME "avx2"
#define TF_ISA_TABLE kAvx2Kernels
#define TF_VEC_WIDTH 8
#define TF_TILE_M 2
#define TF_TILE_N 4
#define TF_F32_TILE_M 4  // the widening tile (f32, f16, int8, q4 weights)
#define TF_F32_TILE_N 3
#define TF_F32P_TILE_M 6  // the f32-panels tile: 6 rows x 1 panel (12 accumulators)
#define TF_F32P_TILE_P 1
#define TF_F32_PANELS 1
#define TF_ISA_INT8_BLOCKS 1
#include "kernels/isa_impl.inc"
