// Run-time choice of instruction set for the hot kernels. The library is compiled for the baseline
// of its target (x86-64: SSE2) unless the user asks for more, and kernels that gain from wider
// vectors carry a second body compiled for AVX2 (GCC/Clang `target` attribute; FMA deliberately not
// enabled), chosen once per process from what the CPU supports. Every wider body is bit-identical
// to the baseline one (same IEEE operations in the same order per element, no contraction into
// FMA), so ranks on different CPUs encode the same bytes.
//
// SLUICE_SIMD=baseline in the environment forces the baseline bodies (tests run both ways).
#pragma once

#include <cstdlib>
#include <cstring>

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define SLUICE_HAVE_AVX2_TARGET 1
/// Marks a function body compiled for AVX2 (without FMA, so nothing is contracted); call it only
/// when use_avx2().
#define SLUICE_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define SLUICE_HAVE_AVX2_TARGET 0
#define SLUICE_TARGET_AVX2
#endif

namespace sluice {

/// Instruction-set levels the kernels dispatch on, ordered.
enum class simd : int {
  baseline = 0,  ///< what the translation unit was compiled for
  avx2 = 1,      ///< AVX2 (256-bit integer and float vectors)
};

namespace simd_detail {

inline simd detect() noexcept {
  if (char const* e = std::getenv("SLUICE_SIMD"); e != nullptr && std::strcmp(e, "baseline") == 0)
    return simd::baseline;
#if SLUICE_HAVE_AVX2_TARGET
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return simd::avx2;
#endif
  return simd::baseline;
}

}  // namespace simd_detail

/// The level this process's kernels use: the best the CPU supports, or baseline when the
/// environment says SLUICE_SIMD=baseline. Decided at the first call; thread-safe.
inline simd simd_level() noexcept {
  static simd const level = simd_detail::detect();
  return level;
}

/// True when the AVX2 bodies run.
inline bool use_avx2() noexcept {
#if SLUICE_HAVE_AVX2_TARGET
  return simd_level() >= simd::avx2;
#else
  return false;
#endif
}

}  // namespace sluice
