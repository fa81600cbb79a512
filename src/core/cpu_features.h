#pragma once
// What the CPU we run on can do, read once with CPUID (and XGETBV, so that an instruction set the
// OS does not save the registers of counts as absent). Kernels are picked from this at run time;
// nothing is compiled for the build machine's CPU.

#include <string>

namespace tf {

struct CpuFeatures {
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx_vnni = false;  // AVX-VNNI: vpdpbusd on 256 bits (VEX), without AVX-512
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;

  // The feature set the AVX-512 kernels are compiled for.
  bool has_avx512_kernels() const {
    return avx512f && avx512bw && avx512vl && avx512dq && fma && f16c;
  }
  bool has_avx2_kernels() const { return avx2 && fma && f16c; }

  std::string to_string() const;  // "avx2 fma f16c avx512f ..."
};

// Detected once, then cached. TOKENFLOW_ISA=portable|avx2|avx2-vnni|avx512|avx512-vnni|avx512-bf16
// caps what is reported at that kernel table (for tests and benchmarks of the slower paths on a
// fast machine; avx2 is an AVX2 + FMA machine without AVX-VNNI, avx512 one without VNNI or BF16).
const CpuFeatures& cpu_features();

}  // namespace tf
