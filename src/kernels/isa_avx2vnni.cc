// AVX2 + FMA + AVX-VNNI build of the kernel bodies (Alder Lake and later client parts, Zen 5
// without AVX-512): the block formats' int8 dot products with the 256-bit vpdpbusd; compiled with
// -mavx2 -mfma -mf16c -mavxvnni.
#define TF_ISA_NAMESPACE avx2vnni
#define TF_ISA_NAME "avx2-vnni"
#define TF_ISA_TABLE kAvx2VnniKernels
#define TF_VEC_WIDTH 8
#define TF_TILE_M 2
#define TF_TILE_N 4
#define TF_F32_TILE_M 4  // the widening tile (f32, f16, int8, q4 weights)
#define TF_F32_TILE_N 3
#define TF_F32P_TILE_M 6  // the f32-panels tile: 6 rows x 1 panel (12 accumulators)
#define TF_F32P_TILE_P 1
#define TF_F32_PANELS 1
#define TF_ISA_INT8_BLOCKS 1
#define TF_ISA_AVXVNNI 1
#include "kernels/isa_impl.inc"
