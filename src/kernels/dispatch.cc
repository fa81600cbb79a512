#include <cstdlib>
#include <string_view>

#include "core/cpu_features.h"
#include "kernels/amx.h"
#include "kernels/isa.h"

#if defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tf::kernels {

#if defined(__x86_64__)
bool amx_enable() {
  static const bool granted = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.amx_tile || !f.amx_bf16 || !f.amx_int8) return false;
    constexpr long kArchReqXcompPerm = 0x1023;  // asm/prctl.h
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

const IsaKernels& amx_kernels() {
  static const IsaKernels table = [] {
    IsaKernels t = kAvx512Bf16Kernels;
    t.name = "amx";
    t.tiles = &amx_tile_kernels();
    t.matmul_cols_panels = &amx_matmul_cols_panels;
    return t;
  }();
  return table;
}
#endif

std::vector<const IsaKernels*> supported_tables() {
  std::vector<const IsaKernels*> out = {&kPortableKernels};
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (f.has_avx2_kernels()) out.push_back(&kAvx2Kernels);
  if (f.has_avx2_kernels() && f.avx_vnni) out.push_back(&kAvx2VnniKernels);
  if (f.has_avx512_kernels()) out.push_back(&kAvx512Kernels);
  if (f.has_avx512_kernels() && f.avx512_vnni) out.push_back(&kAvx512VnniKernels);
  if (f.has_avx512_kernels() && f.avx512_vnni && f.avx512_bf16) {
    out.push_back(&kAvx512Bf16Kernels);
    if (amx_enable()) out.push_back(&amx_kernels());
  }
#endif
  return out;
}

const IsaKernels& isa() {
  static const IsaKernels* table = supported_tables().back();
  return *table;
}

namespace {
bool panels_allowed() {
  const char* e = std::getenv("TOKENFLOW_PANELS");
  return !(e != nullptr && std::string_view(e) == "0");
}
}  // namespace

bool use_weight_panels() {
  static const bool on = isa().matmul_cols_panels != nullptr && panels_allowed();
  return on;
}

bool use_float_panels(WeightType t) {
  static const bool on = isa().f32_panels && panels_allowed();
  // bf16 keeps its own dot products (and tiles) where the table has them.
  return on && (t == WeightType::kF32 || t == WeightType::kF16 ||
                (t == WeightType::kBF16 && isa().matmul_cols_bf16 == nullptr));
}

}  // namespace tf::kernels
