// The lane types the SIMD kernel bodies are written over: vf32<L> holds width floats at level L
// (baseline: SSE2, 4, or one scalar off x86; avx2: 8; avx512: 16), each compiled for its level's
// instruction set, so that a body stamped at L (core/detail/simd_stamp.hpp) can inline them.
// Products round on their own (an empty asm keeps them out of FMA; see core/simd.hpp).
#pragma once

#include <cstddef>
#include <cstring>

#include <sluice/core/simd.hpp>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

/// Lane operations and the helpers of a stamped body: always inlined (each is a few instructions).
#define SLUICE_SIMD_INLINE __attribute__((always_inline)) inline

namespace sluice::simd_detail {

template <simd L>
struct vf32;

#if defined(__SSE2__)
template <>
struct vf32<simd::baseline> {
  static constexpr std::size_t width = 4;
  __m128 v;
  static SLUICE_SIMD_INLINE vf32 load(float const* p) noexcept { return {_mm_loadu_ps(p)}; }
  static SLUICE_SIMD_INLINE void store(float* p, vf32 x) noexcept { _mm_storeu_ps(p, x.v); }
  // The first k < width lanes, through a buffer (no masked moves at this level); the rest zero.
  static SLUICE_SIMD_INLINE vf32 load_n(float const* p, std::size_t k) noexcept {
    alignas(64) float b[width] = {};
    std::memcpy(b, p, k * sizeof(float));
    return load(b);
  }
  static SLUICE_SIMD_INLINE void store_n(float* p, vf32 x, std::size_t k) noexcept {
    alignas(64) float b[width];
    store(b, x);
    std::memcpy(p, b, k * sizeof(float));
  }
  static SLUICE_SIMD_INLINE vf32 set(float x) noexcept { return {_mm_set1_ps(x)}; }
  friend SLUICE_SIMD_INLINE vf32 operator+(vf32 a, vf32 b) noexcept { return {_mm_add_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator-(vf32 a, vf32 b) noexcept { return {_mm_sub_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator/(vf32 a, vf32 b) noexcept { return {_mm_div_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator*(vf32 a, vf32 b) noexcept {
    __m128 r = _mm_mul_ps(a.v, b.v);
    __asm__("" : "+x"(r));
    return {r};
  }
  friend SLUICE_SIMD_INLINE vf32 sqrt(vf32 a) noexcept { return {_mm_sqrt_ps(a.v)}; }
};
#else
template <>
struct vf32<simd::baseline> {
  static constexpr std::size_t width = 1;
  float v;
  static SLUICE_SIMD_INLINE vf32 load(float const* p) noexcept { return {*p}; }
  static SLUICE_SIMD_INLINE void store(float* p, vf32 x) noexcept { *p = x.v; }
  static SLUICE_SIMD_INLINE vf32 load_n(float const* p, std::size_t) noexcept { return {*p}; }
  static SLUICE_SIMD_INLINE void store_n(float* p, vf32 x, std::size_t) noexcept { *p = x.v; }
  static SLUICE_SIMD_INLINE vf32 set(float x) noexcept { return {x}; }
  friend SLUICE_SIMD_INLINE vf32 operator+(vf32 a, vf32 b) noexcept { return {a.v + b.v}; }
  friend SLUICE_SIMD_INLINE vf32 operator-(vf32 a, vf32 b) noexcept { return {a.v - b.v}; }
  friend SLUICE_SIMD_INLINE vf32 operator/(vf32 a, vf32 b) noexcept { return {a.v / b.v}; }
  friend SLUICE_SIMD_INLINE vf32 operator*(vf32 a, vf32 b) noexcept {
    float r = a.v * b.v;
#if defined(__GNUC__) || defined(__clang__)
    __asm__("" : "+m"(r));
#endif
    return {r};
  }
  friend SLUICE_SIMD_INLINE vf32 sqrt(vf32 a) noexcept { return {__builtin_sqrtf(a.v)}; }
};
#endif

#if SLUICE_HAVE_AVX2_TARGET
SLUICE_SIMD_BEGIN_AVX2
template <>
struct vf32<simd::avx2> {
  static constexpr std::size_t width = 8;
  __m256 v;
  static SLUICE_SIMD_INLINE vf32 load(float const* p) noexcept { return {_mm256_loadu_ps(p)}; }
  static SLUICE_SIMD_INLINE void store(float* p, vf32 x) noexcept { _mm256_storeu_ps(p, x.v); }
  // The first k < width lanes, through a buffer (no masked moves at this level); the rest zero.
  static SLUICE_SIMD_INLINE vf32 load_n(float const* p, std::size_t k) noexcept {
    alignas(64) float b[width] = {};
    std::memcpy(b, p, k * sizeof(float));
    return load(b);
  }
  static SLUICE_SIMD_INLINE void store_n(float* p, vf32 x, std::size_t k) noexcept {
    alignas(64) float b[width];
    store(b, x);
    std::memcpy(p, b, k * sizeof(float));
  }
  static SLUICE_SIMD_INLINE vf32 set(float x) noexcept { return {_mm256_set1_ps(x)}; }
  friend SLUICE_SIMD_INLINE vf32 operator+(vf32 a, vf32 b) noexcept { return {_mm256_add_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator-(vf32 a, vf32 b) noexcept { return {_mm256_sub_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator/(vf32 a, vf32 b) noexcept { return {_mm256_div_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator*(vf32 a, vf32 b) noexcept {
    __m256 r = _mm256_mul_ps(a.v, b.v);
    __asm__("" : "+x"(r));
    return {r};
  }
  friend SLUICE_SIMD_INLINE vf32 sqrt(vf32 a) noexcept { return {_mm256_sqrt_ps(a.v)}; }
};
SLUICE_SIMD_END_AVX2
#endif

#if SLUICE_HAVE_AVX512_TARGET
SLUICE_SIMD_BEGIN_AVX512
template <>
struct vf32<simd::avx512> {
  static constexpr std::size_t width = 16;
  __m512 v;
  static SLUICE_SIMD_INLINE vf32 load(float const* p) noexcept { return {_mm512_loadu_ps(p)}; }
  static SLUICE_SIMD_INLINE void store(float* p, vf32 x) noexcept { _mm512_storeu_ps(p, x.v); }
  static SLUICE_SIMD_INLINE vf32 load_n(float const* p, std::size_t k) noexcept {
    return {_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << k) - 1), p)};
  }
  static SLUICE_SIMD_INLINE void store_n(float* p, vf32 x, std::size_t k) noexcept {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << k) - 1), x.v);
  }
  static SLUICE_SIMD_INLINE vf32 set(float x) noexcept { return {_mm512_set1_ps(x)}; }
  friend SLUICE_SIMD_INLINE vf32 operator+(vf32 a, vf32 b) noexcept { return {_mm512_add_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator-(vf32 a, vf32 b) noexcept { return {_mm512_sub_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator/(vf32 a, vf32 b) noexcept { return {_mm512_div_ps(a.v, b.v)}; }
  friend SLUICE_SIMD_INLINE vf32 operator*(vf32 a, vf32 b) noexcept {
    __m512 r = _mm512_mul_ps(a.v, b.v);
    __asm__("" : "+v"(r));
    return {r};
  }
  friend SLUICE_SIMD_INLINE vf32 sqrt(vf32 a) noexcept { return {_mm512_sqrt_ps(a.v)}; }
};
SLUICE_SIMD_END_AVX512
#endif

}  // namespace sluice::simd_detail
