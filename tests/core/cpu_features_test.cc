#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

namespace tf {
namespace {

std::set<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::set<std::string> out;
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

bool isa_capped_to_portable() {
  const char* cap = std::getenv("TOKENFLOW_ISA");
  return cap != nullptr && std::string_view(cap) == "portable";
}

TEST(CpuFeatures, ToStringIsNonEmpty) {
  EXPECT_FALSE(cpu_features().to_string().empty());
  EXPECT_FALSE(CpuFeatures{}.to_string().empty());
}

TEST(CpuFeatures, ToStringListsExactlyTheFeaturesThatAreOn) {
  CpuFeatures f;
  f.avx2 = true;
  f.avx512f = true;
  const auto w = words(f.to_string());
  EXPECT_EQ(w.size(), 2u) << f.to_string();
  EXPECT_TRUE(w.count("avx2")) << f.to_string();
  EXPECT_TRUE(w.count("avx512f")) << f.to_string();
  EXPECT_FALSE(w.count("avx")) << f.to_string();

  // The detected set: every feature that is on shows up, and nothing else.
  const CpuFeatures& d = cpu_features();
  const auto dw = words(d.to_string());
  int on = 0;
  for (bool b : {d.sse42, d.avx, d.avx2, d.fma, d.f16c, d.avx_vnni, d.avx512f, d.avx512bw,
                 d.avx512vl, d.avx512dq, d.avx512_vnni, d.avx512_bf16, d.avx512_fp16, d.amx_tile,
                 d.amx_bf16, d.amx_int8}) {
    on += b ? 1 : 0;
  }
  if (on > 0) {
    EXPECT_EQ(static_cast<int>(dw.size()), on) << d.to_string();
    EXPECT_EQ(dw.count("avx2") == 1, d.avx2) << d.to_string();
    EXPECT_EQ(dw.count("fma") == 1, d.fma) << d.to_string();
    EXPECT_EQ(dw.count("avx512f") == 1, d.avx512f) << d.to_string();
  }
}

TEST(CpuFeatures, ImplicationsHold) {
  const CpuFeatures& f = cpu_features();
  SCOPED_TRACE(f.to_string());
  if (f.has_avx512_kernels()) {
    EXPECT_TRUE(f.avx2);
    EXPECT_TRUE(f.fma);
    EXPECT_TRUE(f.avx);
  }
  if (f.has_avx2_kernels()) {
    EXPECT_TRUE(f.avx);
    EXPECT_TRUE(f.fma);
    EXPECT_TRUE(f.f16c);
  }
  if (f.avx2) {
    EXPECT_TRUE(f.avx);
  }
  if (f.fma || f.f16c) {
    EXPECT_TRUE(f.avx) << "FMA and F16C need the OS to save YMM registers";
  }
  if (f.avx512f || f.avx512bw || f.avx512vl || f.avx512dq) {
    EXPECT_TRUE(f.avx2);
  }
  if (f.avx512_vnni || f.avx512_bf16 || f.avx512_fp16) {
    EXPECT_TRUE(f.avx512f);
  }
  if (f.amx_bf16 || f.amx_int8) {
    EXPECT_TRUE(f.amx_tile);
  }
}

TEST(CpuFeatures, KernelSetPredicates) {
  CpuFeatures f;
  EXPECT_FALSE(f.has_avx2_kernels());
  EXPECT_FALSE(f.has_avx512_kernels());
  f.avx = f.avx2 = f.fma = true;
  EXPECT_FALSE(f.has_avx2_kernels()) << "needs f16c too";
  f.f16c = true;
  EXPECT_TRUE(f.has_avx2_kernels());
  f.avx512f = f.avx512bw = f.avx512vl = true;
  EXPECT_FALSE(f.has_avx512_kernels()) << "needs avx512dq too";
  f.avx512dq = true;
  EXPECT_TRUE(f.has_avx512_kernels());
  f.fma = false;
  EXPECT_FALSE(f.has_avx512_kernels());
}

#if defined(__x86_64__)
TEST(CpuFeatures, X86_64HasSse42) {
  if (isa_capped_to_portable()) GTEST_SKIP() << "TOKENFLOW_ISA=portable clears every feature";
  EXPECT_TRUE(cpu_features().sse42);
  EXPECT_EQ(words(cpu_features().to_string()).count("sse4.2"), 1u) << cpu_features().to_string();
}
#endif

// TOKENFLOW_ISA is read once per process, so each cap is checked in a fresh child process.
TEST(CpuFeaturesDeathTest, IsaCapLimitsWhatIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Restore what the run was started with, so later tests see the same cap.
  const char* before = std::getenv("TOKENFLOW_ISA");
  const std::optional<std::string> saved =
      before ? std::optional<std::string>(before) : std::nullopt;
  for (const char* cap :
       {"portable", "avx2", "avx2-vnni", "avx512", "avx512-vnni", "avx512-bf16"}) {
    SCOPED_TRACE(cap);
    setenv("TOKENFLOW_ISA", cap, 1);
    EXPECT_EXIT(
        {
          const CpuFeatures& f = cpu_features();
          const std::string_view c(cap);
          bool ok = true;
          if (c == "portable") ok = !f.avx && !f.avx2 && !f.has_avx2_kernels();
          if (c == "avx2") ok = !f.avx512f && !f.avx512bw && !f.has_avx512_kernels() && !f.avx_vnni;
          if (c == "avx2-vnni") ok = !f.avx512f && !f.has_avx512_kernels();
          const bool no_amx = !f.amx_tile && !f.amx_bf16 && !f.amx_int8;
          if (c == "avx512") ok = no_amx && !f.avx512_vnni && !f.avx512_bf16;
          if (c == "avx512-vnni") ok = no_amx && !f.avx512_bf16;
          if (c == "avx512-bf16") ok = no_amx;
          if (!ok) std::fprintf(stderr, "cap %s gave: %s\n", cap, f.to_string().c_str());
          std::fflush(nullptr);
          std::_Exit(ok ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
  }
  if (saved) {
    setenv("TOKENFLOW_ISA", saved->c_str(), 1);
  } else {
    unsetenv("TOKENFLOW_ISA");
  }
}

}  // namespace
}  // namespace tf
