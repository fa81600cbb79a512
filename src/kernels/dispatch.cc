#include "core/cpu_features.h"
#include "kernels/isa.h"

namespace tf::kernels {

const IsaKernels& isa() {
  static const IsaKernels* table = [] {
    const CpuFeatures& f = cpu_features();
#if defined(__x86_64__)
    if (f.has_avx512_kernels() && f.avx512_vnni && f.avx512_bf16) return &kAvx512Bf16Kernels;
    if (f.has_avx512_kernels() && f.avx512_vnni) return &kAvx512VnniKernels;
    if (f.has_avx512_kernels()) return &kAvx512Kernels;
    if (f.has_avx2_kernels()) return &kAvx2Kernels;
#endif
    (void)f;
    return &kPortableKernels;
  }();
  return *table;
}

}  // namespace tf::kernels
