// sluice::simd_level(): the levels are ordered, SLUICE_SIMD caps them (ctest runs this binary with
// SLUICE_SIMD=baseline and =avx2 too), and each level's use_* agrees with it.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>

#include <sluice/core/simd.hpp>

TEST_CASE("simd_level honours SLUICE_SIMD and the use_* predicates agree with it") {
  sluice::simd const level = sluice::simd_level();
  CHECK(level == sluice::simd_level());  // decided once
  CHECK(sluice::use_avx2() == (level >= sluice::simd::avx2));
  CHECK(sluice::use_avx512() == (level >= sluice::simd::avx512));
  if (sluice::use_avx512()) CHECK(sluice::use_avx2());
  if (char const* e = std::getenv("SLUICE_SIMD"); e != nullptr) {
    if (std::strcmp(e, "baseline") == 0) CHECK(level == sluice::simd::baseline);
    if (std::strcmp(e, "avx2") == 0) CHECK(level <= sluice::simd::avx2);
  }
#if SLUICE_HAVE_AVX2_TARGET
  __builtin_cpu_init();
  char const* e = std::getenv("SLUICE_SIMD");
  bool const capped = e != nullptr && (std::strcmp(e, "baseline") == 0 || std::strcmp(e, "avx2") == 0);
  if (!capped && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    CHECK(level == sluice::simd::avx512);
  if ((e == nullptr || std::strcmp(e, "baseline") != 0) && __builtin_cpu_supports("avx2")) CHECK(sluice::use_avx2());
#endif
}
