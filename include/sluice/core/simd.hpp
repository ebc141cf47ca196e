// Run-time choice of instruction set for the hot kernels, and the one idiom they are written in.
// The library is compiled for the baseline of its target (x86-64: SSE2) unless the user asks for
// more. A kernel body is written once, over a lane type (detail::simd::vf32<L>, core/detail/lanes.hpp),
// in a header without include guard that core/detail/simd_stamp.hpp includes once per level, each
// time compiled for that level's instruction set (GCC `#pragma GCC target`, clang `#pragma clang
// attribute`), as the explicit specialization Body<L> of a class template; detail::simd::dispatch
// picks the level once per public call. (A body template without the target cannot call the
// targeted lane operations, even inlined into a targeted caller: GCC and clang both refuse.)
//
// Every level gives the bits of the baseline (same IEEE operations in the same order per element,
// no contraction into FMA), so ranks on different CPUs encode the same bytes. AVX-512F includes FMA
// (and so does a baseline the user raised with -march), so the lane types round every product on
// its own: the product passes through an empty asm, which stops GCC (-ffp-contract=fast) and
// clang from fusing it with the add or subtract that consumes it.
//
// SLUICE_SIMD in the environment caps the level: `baseline` forces the baseline bodies, `avx2`
// the AVX2 ones on an AVX-512 CPU (tests run all three).
#pragma once

#include <cstdlib>
#include <cstring>
#include <type_traits>

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define SLUICE_HAVE_AVX2_TARGET 1
/// Marks a function compiled for AVX2 outside the stamped bodies (the library has none left; the
/// benchmarks' bandwidth reference kernel); call it only when use_avx2().
#define SLUICE_TARGET_AVX2 __attribute__((target("avx2")))
#define SLUICE_HAVE_AVX512_TARGET 1
/// Marks a function compiled for AVX-512 F/BW/VL/DQ (and AVX2) outside the stamped bodies, as
/// SLUICE_TARGET_AVX2; call it only when use_avx512(). FMA is part of AVX-512F: products go
/// through the lane types.
#define SLUICE_TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq")))
#else
#define SLUICE_HAVE_AVX2_TARGET 0
#define SLUICE_TARGET_AVX2
#define SLUICE_HAVE_AVX512_TARGET 0
#define SLUICE_TARGET_AVX512
#endif

// GCC 12's avx512fintrin.h passes _mm512_undefined_epi32() (`__m512i __Y = __Y;`) as the unused
// source of its unmasked intrinsics, which -Wmaybe-uninitialized and -Wuninitialized report
// wherever they are inlined (GCC bug 105593): wrap AVX-512 bodies in these.
#if defined(__GNUC__) && !defined(__clang__)
#define SLUICE_AVX512_DIAGNOSTICS_BEGIN                                                      \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define SLUICE_AVX512_DIAGNOSTICS_END _Pragma("GCC diagnostic pop")
#else
#define SLUICE_AVX512_DIAGNOSTICS_BEGIN
#define SLUICE_AVX512_DIAGNOSTICS_END
#endif

// Regions of code compiled for one level (core/detail/lanes.hpp, core/detail/simd_stamp.hpp):
// every function defined between BEGIN and END carries the level's target.
// (_Pragma takes one string literal: the lines stay long.)
// clang-format off
#if SLUICE_HAVE_AVX2_TARGET && defined(__clang__)
#define SLUICE_SIMD_BEGIN_AVX2 _Pragma("clang attribute push(__attribute__((target(\"avx2\"))), apply_to = function)")
#define SLUICE_SIMD_BEGIN_AVX512 _Pragma("clang attribute push(__attribute__((target(\"avx2,avx512f,avx512bw,avx512vl,avx512dq\"))), apply_to = function)")
#define SLUICE_SIMD_END_AVX2 _Pragma("clang attribute pop")
#define SLUICE_SIMD_END_AVX512 _Pragma("clang attribute pop")
#elif SLUICE_HAVE_AVX2_TARGET
#define SLUICE_SIMD_BEGIN_AVX2 _Pragma("GCC push_options") _Pragma("GCC target(\"avx2\")")
#define SLUICE_SIMD_BEGIN_AVX512                                                                 \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,avx512f,avx512bw,avx512vl,avx512dq\")") \
      SLUICE_AVX512_DIAGNOSTICS_BEGIN
#define SLUICE_SIMD_END_AVX2 _Pragma("GCC pop_options")
#define SLUICE_SIMD_END_AVX512 SLUICE_AVX512_DIAGNOSTICS_END _Pragma("GCC pop_options")
#endif
// clang-format on

namespace sluice {

/// Instruction-set levels the kernels dispatch on, ordered.
enum class simd : int {
  baseline = 0,  ///< what the translation unit was compiled for
  avx2 = 1,      ///< AVX2 (256-bit integer and float vectors)
  avx512 = 2,    ///< AVX-512 F, BW, VL and DQ (512-bit vectors, mask registers), with AVX2
};

namespace detail::simd {

inline sluice::simd detect() noexcept {
  sluice::simd cap = sluice::simd::avx512;
  if (char const* e = std::getenv("SLUICE_SIMD"); e != nullptr) {
    if (std::strcmp(e, "baseline") == 0) return sluice::simd::baseline;
    if (std::strcmp(e, "avx2") == 0) cap = sluice::simd::avx2;
  }
#if SLUICE_HAVE_AVX2_TARGET
  __builtin_cpu_init();
  // __builtin_cpu_supports reports a feature only when the OS saves its registers (XCR0).
  if (cap >= sluice::simd::avx512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx2"))
    return sluice::simd::avx512;
  if (__builtin_cpu_supports("avx2")) return sluice::simd::avx2;
#endif
  return sluice::simd::baseline;
}

}  // namespace detail::simd

/// The level this process's kernels use: the best the CPU supports, capped by SLUICE_SIMD
/// (`baseline` or `avx2`) in the environment. Decided at the first call; thread-safe.
inline simd simd_level() noexcept {
  static simd const level = detail::simd::detect();
  return level;
}

/// True when the AVX2 bodies run (also on AVX-512 CPUs, for kernels without an AVX-512 body).
/// Kernels choose their level with detail::simd::dispatch; this is for code outside them.
inline bool use_avx2() noexcept {
#if SLUICE_HAVE_AVX2_TARGET
  return simd_level() >= simd::avx2;
#else
  return false;
#endif
}

/// True when bodies compiled with `target("bmi,bmi2")` may run: the CPU has BMI1 and BMI2 and
/// SLUICE_SIMD allows AVX2 (every AVX2 CPU sluice targets has them; integer-only bodies such as the
/// index decoder use them).
inline bool use_bmi2() noexcept {
#if SLUICE_HAVE_AVX2_TARGET
  static bool const yes = use_avx2() && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  return yes;
#else
  return false;
#endif
}

/// True when the AVX-512 bodies run.
inline bool use_avx512() noexcept {
#if SLUICE_HAVE_AVX512_TARGET
  return simd_level() >= simd::avx512;
#else
  return false;
#endif
}

namespace detail::simd {

/// The level L as a type, for the generic lambda detail::simd::dispatch calls.
template <sluice::simd L>
using level_t = std::integral_constant<sluice::simd, L>;

/// f(level_t<L>{}) for the level L this process runs, capped at Max (a kernel stamped only up to
/// Max): the one choice per public call; f calls Body<L>'s entry point.
template <sluice::simd Max = sluice::simd::avx512, class F>
decltype(auto) dispatch(F&& f) {
#if SLUICE_HAVE_AVX512_TARGET
  if constexpr (Max >= sluice::simd::avx512)
    if (simd_level() >= sluice::simd::avx512) return f(level_t<sluice::simd::avx512>{});
#endif
#if SLUICE_HAVE_AVX2_TARGET
  if constexpr (Max >= sluice::simd::avx2)
    if (simd_level() >= sluice::simd::avx2) return f(level_t<sluice::simd::avx2>{});
#endif
  return f(level_t<sluice::simd::baseline>{});
}

}  // namespace detail::simd

}  // namespace sluice
