#include "core/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tf {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  f.sse42 = ecx & (1u << 20);
  const bool osxsave = ecx & (1u << 27);
  const bool cpu_avx = ecx & (1u << 28);
  f.fma = ecx & (1u << 12);
  f.f16c = ecx & (1u << 29);
  const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;
  const bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);
  f.avx = cpu_avx && os_ymm;
  if (!f.avx) {
    f.fma = f.f16c = false;
    return f;
  }
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = ebx & (1u << 5);
  if (os_zmm) {
    f.avx512f = ebx & (1u << 16);
    f.avx512dq = ebx & (1u << 17);
    f.avx512bw = ebx & (1u << 30);
    f.avx512vl = ebx & (1u << 31);
    f.avx512_vnni = ecx & (1u << 11);
    f.avx512_fp16 = edx & (1u << 23);
  }
  if (os_amx) {
    f.amx_bf16 = edx & (1u << 22);
    f.amx_tile = edx & (1u << 24);
    f.amx_int8 = edx & (1u << 25);
  }
  unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
  __cpuid_count(7, 1, eax1, ebx1, ecx1, edx1);
  f.avx_vnni = eax1 & (1u << 4);
  if (os_zmm) f.avx512_bf16 = eax1 & (1u << 5);
  return f;
}
#else
CpuFeatures detect() {
  return CpuFeatures{};
}
#endif

void apply_cap(CpuFeatures& f) {
  const char* cap = std::getenv("TOKENFLOW_ISA");
  if (cap == nullptr) return;
  std::string_view c(cap);
  if (c == "portable") {
    f = CpuFeatures{};
  } else if (c == "avx2" || c == "avx2-vnni") {
    if (c == "avx2") f.avx_vnni = false;  // an AVX2 + FMA machine (Zen 2/3, Haswell-Skylake)
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = false;
    f.avx512_vnni = f.avx512_bf16 = f.avx512_fp16 = false;
    f.amx_tile = f.amx_bf16 = f.amx_int8 = false;
  } else if (c == "avx512" || c == "avx512-vnni" || c == "avx512-bf16") {
    // One AVX-512 table and those below it: avx512 (Skylake-X: no VNNI, no BF16), avx512-vnni
    // (Cascade Lake, Ice Lake), avx512-bf16 (Zen 4/5, Sapphire Rapids without its AMX).
    if (c != "avx512-bf16") f.avx512_bf16 = f.avx512_fp16 = false;
    if (c == "avx512") f.avx512_vnni = false;
    f.amx_tile = f.amx_bf16 = f.amx_int8 = false;
  }
}

}  // namespace

std::string CpuFeatures::to_string() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(sse42, "sse4.2");
  add(avx, "avx");
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx_vnni, "avx_vnni");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_fp16, "avx512_fp16");
  add(amx_tile, "amx_tile");
  add(amx_bf16, "amx_bf16");
  add(amx_int8, "amx_int8");
  return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f = detect();
    apply_cap(f);
    return f;
  }();
  return features;
}

}  // namespace tf
