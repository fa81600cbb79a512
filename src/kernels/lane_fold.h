#pragma once
// One level of the kernels' lane-sum trees, on GCC vector types of W = 8 or 16 lanes (float or
// integer): fold<W, L>(a, b) adds the lanes of a and of b in pairs W / 2^L apart within each
// group of W / 2^(L-1), the sums of a in the low half of the result and b's in the high half.
// Levels 1..log2(W) in turn reduce a vector to one sum; isa_impl.inc builds hsum_many and
// fold_level from them.
//
// Internal linkage: the kernel files are compiled with different -m flags, and a shared inline
// definition could be merged into one copy built for the widest of them.

namespace tf::kernels {
namespace {

#define TF_SV __builtin_shufflevector
template <int W, int L, class V>
__attribute__((always_inline)) inline V fold(V a, V b) {
  if constexpr (W == 16) {
    if constexpr (L == 1)
      return TF_SV(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
             TF_SV(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    else if constexpr (L == 2)
      return TF_SV(a, b, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
             TF_SV(a, b, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    else if constexpr (L == 3)
      return TF_SV(a, b, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
             TF_SV(a, b, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    else
      return TF_SV(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
             TF_SV(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  } else {
    static_assert(W == 8);
    if constexpr (L == 1)
      return TF_SV(a, b, 0, 1, 2, 3, 8, 9, 10, 11) + TF_SV(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
    else if constexpr (L == 2)
      return TF_SV(a, b, 0, 1, 4, 5, 8, 9, 12, 13) + TF_SV(a, b, 2, 3, 6, 7, 10, 11, 14, 15);
    else
      return TF_SV(a, b, 0, 2, 4, 6, 8, 10, 12, 14) + TF_SV(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
  }
}
#undef TF_SV

}  // namespace
}  // namespace tf::kernels
