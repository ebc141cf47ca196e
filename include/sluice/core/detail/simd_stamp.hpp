// Stamps a SIMD kernel body once per instruction-set level (no include guard: included once per
// body). Define SLUICE_SIMD_BODY as the body's header, then include this; the body sees
// SLUICE_SIMD_LEVEL (a sluice::simd value) and defines the explicit specialization of its class
// template for that level over detail::simd::vf32<SLUICE_SIMD_LEVEL>. The avx2 and avx512 copies
// are compiled for those targets (SLUICE_SIMD_BEGIN_*), so their lane operations inline.
// Define SLUICE_SIMD_MAX_AVX2 to stop at AVX2 (dispatch with that cap).
#include <sluice/core/detail/lanes.hpp>
#include <sluice/core/simd.hpp>

#ifdef SLUICE_SIMD_BODY
#define SLUICE_SIMD_LEVEL ::sluice::simd::baseline
#include SLUICE_SIMD_BODY
#undef SLUICE_SIMD_LEVEL

#if SLUICE_HAVE_AVX2_TARGET
SLUICE_SIMD_BEGIN_AVX2
#define SLUICE_SIMD_LEVEL ::sluice::simd::avx2
#include SLUICE_SIMD_BODY
#undef SLUICE_SIMD_LEVEL
SLUICE_SIMD_END_AVX2
#endif

#if SLUICE_HAVE_AVX512_TARGET && !defined(SLUICE_SIMD_MAX_AVX2)
SLUICE_SIMD_BEGIN_AVX512
#define SLUICE_SIMD_LEVEL ::sluice::simd::avx512
#include SLUICE_SIMD_BODY
#undef SLUICE_SIMD_LEVEL
SLUICE_SIMD_END_AVX512
#endif

#undef SLUICE_SIMD_BODY
#undef SLUICE_SIMD_MAX_AVX2
#endif
