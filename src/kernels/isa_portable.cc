// Baseline build of the kernel bodies: whatever the compiler targets by default (SSE2 on x86-64).
#define TF_ISA_NAMESPACE portable
#define TF_ISA_NAME "portable"
#define TF_ISA_TABLE kPortableKernels
#define TF_VEC_WIDTH 4
#define TF_TILE_M 2
#define TF_TILE_N 4
#include "kernels/isa_impl.inc"
