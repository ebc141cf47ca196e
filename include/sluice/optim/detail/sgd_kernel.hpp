// The SGD per-tile kernel (torch.optim.SGD: momentum, dampening, Nesterov, weight decay) and its
// exact catch-up of skipped steps through the closed form of the linear zero-gradient recurrence.
#pragma once

#include <cstddef>
#include <cstdint>

#include <sluice/optim/detail/kernel.hpp>

namespace sluice::detail::optim {

/// Per-step scalars of one SGD step t.
struct sgd_kernel {
  std::size_t moments = 0;  // 1 with momentum
  std::uint64_t t = 0;
  float lr = 0, mu = 0, c = 0, wd = 0;
  bool nesterov = false, first = false, has_wd = false;
  mat2 regular{}, initial{};  // zero-gradient step maps on (param, buffer)

  sgd_kernel(double lr_, double momentum, double dampening, double weight_decay, bool nesterov_, std::uint64_t step)
      : moments(momentum != 0 ? 1 : 0),
        t(step),
        lr(static_cast<float>(lr_)),
        mu(static_cast<float>(momentum)),
        c(static_cast<float>(1 - dampening)),
        wd(static_cast<float>(weight_decay)),
        nesterov(nesterov_),
        first(step == 1),
        has_wd(weight_decay != 0) {
    double const l = lr_, m = momentum, cd = 1 - dampening, w = weight_decay;
    if (momentum == 0) {
      regular = initial = {1 - l * w, 0, 0, 0};
    } else if (!nesterov_) {
      // b' = c w p + m b ; p' = p - l b'
      regular = {1 - l * cd * w, -l * m, cd * w, m};
      // first step: b' = w p ; p' = p - l b'
      initial = {1 - l * w, 0, w, 0};
    } else {
      // b' = c w p + m b ; p' = p - l (w p + m b')
      regular = {1 - l * w - l * m * cd * w, -l * m * m, cd * w, m};
      initial = {1 - l * w - l * m * w, 0, w, 0};
    }
  }

  template <bool Wd>
  void plain(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g, std::size_t n) const noexcept {
    float const l = lr, w = wd;
    SLUICE_OPTIM_SIMD
    for (std::size_t i = 0; i < n; ++i) {
      float d = g[i];
      if constexpr (Wd) d = d + w * p[i];
      p[i] -= l * d;
    }
  }

  template <bool Wd, bool First, bool Nesterov>
  void with_momentum(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g, float* SLUICE_RESTRICT b,
                     std::size_t n) const noexcept {
    float const l = lr, w = wd, m = mu, cc = c;
    SLUICE_OPTIM_SIMD
    for (std::size_t i = 0; i < n; ++i) {
      float d = g[i];
      if constexpr (Wd) d = d + w * p[i];
      float bi;
      if constexpr (First)
        bi = d;
      else
        bi = b[i] * m + cc * d;
      b[i] = bi;
      if constexpr (Nesterov)
        d = d + m * bi;
      else
        d = bi;
      p[i] -= l * d;
    }
  }

  template <bool Wd>
  void momentum_dispatch(float* p, float const* g, float* b, std::size_t n) const noexcept {
    if (first)
      nesterov ? with_momentum<Wd, true, true>(p, g, b, n) : with_momentum<Wd, true, false>(p, g, b, n);
    else
      nesterov ? with_momentum<Wd, false, true>(p, g, b, n) : with_momentum<Wd, false, false>(p, g, b, n);
  }

#if SLUICE_HAVE_AVX512_TARGET
  SLUICE_AVX512_DIAGNOSTICS_BEGIN
  // The same loops in sixteen lanes, the tail masked; products kept out of FMA
  // (simd_detail::opaque), so the bits equal the portable loops'.
  SLUICE_TARGET_AVX512 __attribute__((always_inline)) static inline __m512 mul16(__m512 a, __m512 b) noexcept {
    return simd_detail::opaque(_mm512_mul_ps(a, b));
  }

  template <bool Momentum, bool Wd, bool First, bool Nesterov>
  SLUICE_TARGET_AVX512 __attribute__((always_inline)) inline void lanes16(__m512& p, __m512 d,
                                                                          __m512& b) const noexcept {
    __m512 const l = _mm512_set1_ps(lr), w = _mm512_set1_ps(wd), m = _mm512_set1_ps(mu), cc = _mm512_set1_ps(c);
    if constexpr (Wd) d = _mm512_add_ps(d, mul16(w, p));
    if constexpr (Momentum) {
      if constexpr (First)
        b = d;
      else
        b = _mm512_add_ps(mul16(b, m), mul16(cc, d));
      if constexpr (Nesterov)
        d = _mm512_add_ps(d, mul16(m, b));
      else
        d = b;
    }
    p = _mm512_sub_ps(p, mul16(l, d));
  }

  template <bool Momentum, bool Wd, bool First, bool Nesterov>
  SLUICE_TARGET_AVX512 void run_avx512(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                       float* SLUICE_RESTRICT b, std::size_t n) const noexcept {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m512 pv = _mm512_loadu_ps(p + i), bv = _mm512_setzero_ps();
      if constexpr (Momentum && !First) bv = _mm512_loadu_ps(b + i);
      lanes16<Momentum, Wd, First, Nesterov>(pv, _mm512_loadu_ps(g + i), bv);
      if constexpr (Momentum) _mm512_storeu_ps(b + i, bv);
      _mm512_storeu_ps(p + i, pv);
    }
    if (i < n) {
      auto const k = static_cast<__mmask16>((1u << (n - i)) - 1);
      __m512 pv = _mm512_maskz_loadu_ps(k, p + i), bv = _mm512_setzero_ps();
      if constexpr (Momentum && !First) bv = _mm512_maskz_loadu_ps(k, b + i);
      lanes16<Momentum, Wd, First, Nesterov>(pv, _mm512_maskz_loadu_ps(k, g + i), bv);
      if constexpr (Momentum) _mm512_mask_storeu_ps(b + i, k, bv);
      _mm512_mask_storeu_ps(p + i, k, pv);
    }
  }

  /// run_avx512 over a whole range, one tile at a time inside this body (the per-tile calls of
  /// core() from run_contiguous cost 1-10 % of the streaming rate on Zen 5 at 2 threads).
  template <bool Momentum, bool Wd, bool First, bool Nesterov>
  SLUICE_TARGET_AVX512 void tiles_avx512(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                         float* SLUICE_RESTRICT b, std::size_t n) const noexcept {
    for (std::size_t o = 0; o < n; o += tile)
      run_avx512<Momentum, Wd, First, Nesterov>(p + o, g + o, Momentum ? b + o : nullptr, std::min(tile, n - o));
  }
  SLUICE_AVX512_DIAGNOSTICS_END

  template <bool Wd>
  void momentum_avx512(float* p, float const* g, float* b, std::size_t n) const noexcept {
    if (first)
      nesterov ? run_avx512<true, Wd, true, true>(p, g, b, n) : run_avx512<true, Wd, true, false>(p, g, b, n);
    else
      nesterov ? run_avx512<true, Wd, false, true>(p, g, b, n) : run_avx512<true, Wd, false, false>(p, g, b, n);
  }
#endif

  /// core() over n contiguous elements of any length (run_contiguous's fp32 path without
  /// catch-up or shadow): the AVX-512 tile loop in one call, else core() per tile.
  void core_range(float* p, float const* g, float* const* m, std::size_t n) const noexcept {
#if SLUICE_HAVE_AVX512_TARGET
    if (use_avx512()) {
      float* const b = moments == 0 ? nullptr : m[0];
      if (moments == 0)
        has_wd ? tiles_avx512<false, true, false, false>(p, g, b, n)
               : tiles_avx512<false, false, false, false>(p, g, b, n);
      else if (first)
        dispatch_tiles<true>(p, g, b, n);
      else
        dispatch_tiles<false>(p, g, b, n);
      return;
    }
#endif
    for (std::size_t o = 0; o < n; o += tile) {
      float* mo[2] = {moments == 0 ? nullptr : m[0] + o, nullptr};
      core(p + o, g + o, mo, nullptr, std::min(tile, n - o));
    }
  }

#if SLUICE_HAVE_AVX512_TARGET
  template <bool First>
  void dispatch_tiles(float* p, float const* g, float* b, std::size_t n) const noexcept {
    if (has_wd)
      nesterov ? tiles_avx512<true, true, First, true>(p, g, b, n) : tiles_avx512<true, true, First, false>(p, g, b, n);
    else
      nesterov ? tiles_avx512<true, false, First, true>(p, g, b, n)
               : tiles_avx512<true, false, First, false>(p, g, b, n);
  }
#endif

  /// One step on n contiguous float elements (params, gradient, momentum buffer), in place.
  void core(float* p, float const* g, float* const* m, float*, std::size_t n) const noexcept {
#if SLUICE_HAVE_AVX512_TARGET
    if (use_avx512()) {
      if (moments == 0)
        has_wd ? run_avx512<false, true, false, false>(p, g, nullptr, n)
               : run_avx512<false, false, false, false>(p, g, nullptr, n);
      else
        has_wd ? momentum_avx512<true>(p, g, m[0], n) : momentum_avx512<false>(p, g, m[0], n);
      return;
    }
#endif
    if (moments == 0)
      has_wd ? plain<true>(p, g, n) : plain<false>(p, g, n);
    else
      has_wd ? momentum_dispatch<true>(p, g, m[0], n) : momentum_dispatch<false>(p, g, m[0], n);
  }

  /// Replays steps last[i]+1 .. target with zero gradient exactly: (p, b) evolve linearly, so k
  /// skipped steps are one 2x2 matrix power (the first step of the tensor has its own map because
  /// torch starts the buffer at d instead of mu*b + (1-dampening)*d).
  void catch_up(float* p, float* const* m, std::uint32_t const* last, std::size_t n,
                std::uint64_t target) const noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      if (last[i] >= target) continue;
      std::uint64_t k = target - last[i];
      mat2 a = {};
      if (last[i] == 0) {
        a = initial;
        --k;
      }
      a = regular.pow(k) * a;
      double const pi = p[i], bi = moments != 0 ? static_cast<double>(m[0][i]) : 0.0;
      p[i] = static_cast<float>(a.a * pi + a.b * bi);
      if (moments != 0) m[0][i] = static_cast<float>(a.c * pi + a.d * bi);
    }
  }
};

}  // namespace sluice::detail::optim
