// SLUICE_HOST_DEVICE and the IEEE operations of formulas that run both on the CPU and in CUDA
// device code: one definition of a per-element formula serves the CPU's scalar paths and the
// device kernels (sluice/cuda/functors.hpp). Without nvcc the attributes are empty and the
// operations are the plain C++ operators, so this is plain C++ on the host.
//
// Bit-exactness: every operation here is rounded on its own. nvcc contracts a * b + c into one
// fused multiply-add by default, which rounds once where the CPU rounds twice, so on the device
// the operations go through the _rn intrinsics, which are never contracted.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SLUICE_HOST_DEVICE __host__ __device__
#else
#define SLUICE_HOST_DEVICE
#endif

namespace sluice::detail::ieee {

SLUICE_HOST_DEVICE inline std::uint32_t bits_of(float x) noexcept;
SLUICE_HOST_DEVICE inline float float_of(std::uint32_t u) noexcept;

/// The NaN an x86 CPU (SSE, AVX, AVX-512: where the CPU codecs run) returns for a float
/// operation on a and b whose IEEE result r is NaN: a NaN operand, quieted (a when both are), or
/// the "default NaN" 0xffc00000 for an invalid operation on numbers (Inf - Inf, 0 * Inf, 0 / 0,
/// sqrt of a negative). r itself when it is not NaN. A GPU returns 0x7fffffff for every NaN
/// result, so the device operations below pass theirs through this: a NaN that reaches a frame
/// or a sum then has the CPU's bits.
SLUICE_HOST_DEVICE inline float x86_nan(float r, float a, float b) noexcept {
  if (!(r != r)) return r;
  if (a != a) return float_of(bits_of(a) | 0x00400000u);
  if (b != b) return float_of(bits_of(b) | 0x00400000u);
  return float_of(0xffc00000u);
}
SLUICE_HOST_DEVICE inline double with_bits_set(double x, std::uint64_t set) noexcept {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(static_cast<std::uint64_t>(__double_as_longlong(x)) | set));
#else
  std::uint64_t u;
  std::memcpy(&u, &x, 8);
  u |= set;
  std::memcpy(&x, &u, 8);
  return x;
#endif
}
/// x86_nan for double operations (default NaN 0xfff8000000000000).
SLUICE_HOST_DEVICE inline double x86_nan(double r, double a, double b) noexcept {
  if (!(r != r)) return r;
  if (a != a) return with_bits_set(a, std::uint64_t{1} << 51);
  if (b != b) return with_bits_set(b, std::uint64_t{1} << 51);
  return with_bits_set(0.0, 0xfff8000000000000u);
}

// IEEE single operations, each rounded to nearest even, never fused, with x86's NaN results.
SLUICE_HOST_DEVICE inline float add(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__fadd_rn(a, b), a, b);
#else
  return a + b;
#endif
}
SLUICE_HOST_DEVICE inline float sub(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__fsub_rn(a, b), a, b);
#else
  return a - b;
#endif
}
SLUICE_HOST_DEVICE inline float mul(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__fmul_rn(a, b), a, b);
#else
  return a * b;
#endif
}
SLUICE_HOST_DEVICE inline float div(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__fdiv_rn(a, b), a, b);
#else
  return a / b;
#endif
}
SLUICE_HOST_DEVICE inline float sqrt(float a) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__fsqrt_rn(a), a, a);
#else
  return std::sqrt(a);
#endif
}
SLUICE_HOST_DEVICE inline std::uint32_t bits_of(float x) noexcept {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint32_t>(__float_as_uint(x));
#else
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
SLUICE_HOST_DEVICE inline float float_of(std::uint32_t u) noexcept {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
// IEEE double operations for the catch-up replays, which the CPU computes in double (x86 NaNs).
SLUICE_HOST_DEVICE inline double dadd(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__dadd_rn(a, b), a, b);
#else
  return a + b;
#endif
}
SLUICE_HOST_DEVICE inline double dsub(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__dsub_rn(a, b), a, b);
#else
  return a - b;
#endif
}
SLUICE_HOST_DEVICE inline double dmul(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__dmul_rn(a, b), a, b);
#else
  return a * b;
#endif
}
SLUICE_HOST_DEVICE inline double ddiv(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__ddiv_rn(a, b), a, b);
#else
  return a / b;
#endif
}
SLUICE_HOST_DEVICE inline double dsqrt(double a) noexcept {
#if defined(__CUDA_ARCH__)
  return x86_nan(__dsqrt_rn(a), a, a);
#else
  return std::sqrt(a);
#endif
}
#if defined(__CUDACC__)
// One out-of-line copy of CUDA's pow: the catch-up replay calls it four times per element, and
// inlining each copy costs compile time for nothing measurable in a memory-bound kernel.
__device__ __noinline__ inline double pow_device(double a, double b) noexcept { return ::pow(a, b); }
#endif
/// pow in double: the C library's on the host; CUDA's (within 2 ulp, so not always the host's
/// last bit) on the device.
SLUICE_HOST_DEVICE inline double dpow(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
  return pow_device(a, b);
#else
  return std::pow(a, b);
#endif
}

/// x is neither NaN nor infinite (x - x is 0 exactly then, NaN otherwise).
SLUICE_HOST_DEVICE inline bool finite(float x) noexcept { return sub(x, x) == 0.0f; }

}  // namespace sluice::detail::ieee
