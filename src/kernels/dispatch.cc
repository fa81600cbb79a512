#include "core/cpu_features.h"
#include "kernels/isa.h"

namespace tf::kernels {

std::vector<const IsaKernels*> supported_tables() {
  std::vector<const IsaKernels*> out = {&kPortableKernels};
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (f.has_avx2_kernels()) out.push_back(&kAvx2Kernels);
  if (f.has_avx2_kernels() && f.avx_vnni) out.push_back(&kAvx2VnniKernels);
  if (f.has_avx512_kernels()) out.push_back(&kAvx512Kernels);
  if (f.has_avx512_kernels() && f.avx512_vnni) out.push_back(&kAvx512VnniKernels);
  if (f.has_avx512_kernels() && f.avx512_vnni && f.avx512_bf16) out.push_back(&kAvx512Bf16Kernels);
#endif
  return out;
}

const IsaKernels& isa() {
  static const IsaKernels* table = supported_tables().back();
  return *table;
}

}  // namespace tf::kernels
