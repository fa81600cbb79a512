// AVX-512 + VNNI build of the kernel bodies (the int8 dot-product matmul of int8 and q4 weights);
// compiled with the AVX-512 flags plus -mavx512vnni.
#define TF_ISA_NAMESPACE avx512vnni
#define TF_ISA_NAME "avx512-vnni"
#define TF_ISA_TABLE kAvx512VnniKernels
#define TF_ISA_VNNI 1
#define TF_VEC_WIDTH 16
#define TF_TILE_M 4
#define TF_TILE_N 4
#define TF_F32_TILE_M 4  // the widening tile (f32, f16, int8, q4 weights)
#define TF_F32_TILE_N 6
#define TF_F32P_TILE_M 14  // the f32-panels tile: 14 rows x 2 panels (28 accumulators)
#define TF_F32P_TILE_P 2
#define TF_F32_PANELS 1
#define TF_ISA_INT8_BLOCKS 1
#include "kernels/isa_impl.inc"
