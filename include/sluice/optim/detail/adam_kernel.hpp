// The Adam/AdamW per-tile kernel (torch.optim.Adam / AdamW formulas) and its catch-up of skipped
// steps; shared by sluice::adam and sluice::adamw.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <sluice/optim/detail/kernel.hpp>

namespace sluice::detail::optim {

/// Per-step scalars of one Adam step t, computed once in double, used in float.
struct adam_kernel {
  std::size_t moments = 2;
  std::uint64_t t = 0;
  float b1 = 0, c1 = 0, b2 = 0, c2 = 0, eps = 0, wd = 0, lr_wd = 0, step_size = 0, inv_sqrt_bc2 = 0;
  bool l2 = false, decoupled = false;
  double step_size_d = 0, inv_sqrt_bc2_d = 0, eps_d = 0, b1_d = 0, b2_d = 0, decay_d = 1, ratio = 0;

  adam_kernel(double lr, double beta1, double beta2, double epsilon, double weight_decay, bool decoupled_decay,
              std::uint64_t step)
      : t(step), l2(!decoupled_decay && weight_decay != 0), decoupled(decoupled_decay && weight_decay != 0) {
    auto const td = static_cast<double>(step);
    double const bc1 = 1 - std::pow(beta1, td), bc2 = 1 - std::pow(beta2, td);
    b1_d = beta1;
    b2_d = beta2;
    eps_d = epsilon;
    step_size_d = lr / bc1;
    inv_sqrt_bc2_d = 1 / std::sqrt(bc2);
    decay_d = decoupled ? 1 - lr * weight_decay : 1.0;
    ratio = beta2 > 0 ? beta1 / std::sqrt(beta2) : 0.0;
    b1 = static_cast<float>(beta1);
    c1 = static_cast<float>(1 - beta1);
    b2 = static_cast<float>(beta2);
    c2 = static_cast<float>(1 - beta2);
    eps = static_cast<float>(epsilon);
    wd = static_cast<float>(weight_decay);
    lr_wd = static_cast<float>(lr * weight_decay);
    step_size = static_cast<float>(step_size_d);
    inv_sqrt_bc2 = static_cast<float>(inv_sqrt_bc2_d);
  }

  template <bool L2>
  void moments_pass(float* SLUICE_RESTRICT mm, float* SLUICE_RESTRICT vv, float const* SLUICE_RESTRICT p,
                    float const* SLUICE_RESTRICT g, std::size_t n) const noexcept {
    float const b1_ = b1, c1_ = c1, b2_ = b2, c2_ = c2, wd_ = wd;
    SLUICE_OPTIM_SIMD
    for (std::size_t i = 0; i < n; ++i) {
      float gi = g[i];
      if constexpr (L2) gi = gi + wd_ * p[i];
      mm[i] = mm[i] * b1_ + c1_ * gi;
      vv[i] = vv[i] * b2_ + c2_ * (gi * gi);
    }
  }

  // AdamW's decay joins the update: p - (lr wd p + step m / denom) rounds p once per step, where
  // torch's p * (1 - lr wd) rounds 1 - lr wd to float (up to 3e-8 relative error, every step) and
  // rounds p twice.
  template <bool Decoupled>
  static void update_pass(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT mm, float const* SLUICE_RESTRICT root,
                          std::size_t n, float step, float inv, float e, float lr_wd) noexcept {
    SLUICE_OPTIM_SIMD
    for (std::size_t i = 0; i < n; ++i) {
      float const u = step * (mm[i] / (root[i] * inv + e));
      if constexpr (Decoupled)
        p[i] -= lr_wd * p[i] + u;
      else
        p[i] -= u;
    }
  }

  /// One step on n contiguous float elements (params, gradient, m, v), in place: the fused AVX2
  /// loop where the CPU has AVX2, else the portable tile passes. Both give the same bits.
  void core(float* p, float const* g, float* const* m, float* tmp, std::size_t n) const noexcept {
#if SLUICE_HAVE_AVX2_TARGET
    if (use_avx2()) {
      core_avx2(p, g, m[0], m[1], n);
      return;
    }
#endif
    core_portable(p, g, m, tmp, n);
  }

  /// Three passes over an L1-resident tile (moments; vector sqrt; update), vectorized by the
  /// compiler at the build's baseline ISA.
  void core_portable(float* p, float const* g, float* const* m, float* tmp, std::size_t n) const noexcept {
    if (l2)
      moments_pass<true>(m[0], m[1], p, g, n);
    else
      moments_pass<false>(m[0], m[1], p, g, n);
    sqrt_into(tmp, m[1], n);
    if (decoupled)
      update_pass<true>(p, m[0], tmp, n, step_size, inv_sqrt_bc2, eps, lr_wd);
    else
      update_pass<false>(p, m[0], tmp, n, step_size, inv_sqrt_bc2, eps, lr_wd);
  }

#if SLUICE_HAVE_AVX2_TARGET
  // One pass, eight elements at a time: read p, g, m, v once, write them once. The same IEEE
  // operations in the same order as core_portable, and no FMA (target "avx2" only: a fused
  // multiply-add rounds once where the portable passes round twice), so the bits are identical.
  struct lanes {
    __m256 b1, c1, b2, c2, wd, step, inv, eps, lr_wd;
  };

  __attribute__((target("avx2"))) lanes make_lanes() const noexcept {
    return {_mm256_set1_ps(b1),           _mm256_set1_ps(c1),  _mm256_set1_ps(b2),
            _mm256_set1_ps(c2),           _mm256_set1_ps(wd),  _mm256_set1_ps(step_size),
            _mm256_set1_ps(inv_sqrt_bc2), _mm256_set1_ps(eps), _mm256_set1_ps(lr_wd)};
  }

  template <bool L2, bool Decoupled>
  __attribute__((target("avx2"), always_inline)) static inline void lanes8(lanes const& c, __m256& p, __m256 g,
                                                                           __m256& m, __m256& v) noexcept {
    if constexpr (L2) g = _mm256_add_ps(g, _mm256_mul_ps(c.wd, p));
    m = _mm256_add_ps(_mm256_mul_ps(m, c.b1), _mm256_mul_ps(c.c1, g));
    v = _mm256_add_ps(_mm256_mul_ps(v, c.b2), _mm256_mul_ps(c.c2, _mm256_mul_ps(g, g)));
    __m256 const den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), c.inv), c.eps);
    __m256 const u = _mm256_mul_ps(c.step, _mm256_div_ps(m, den));
    if constexpr (Decoupled)
      p = _mm256_sub_ps(p, _mm256_add_ps(_mm256_mul_ps(c.lr_wd, p), u));
    else
      p = _mm256_sub_ps(p, u);
  }

  /// The scalar tail of a fused loop: the same operations one element at a time.
  template <bool L2, bool Decoupled>
  __attribute__((target("avx2"))) void lane1(float& p, float g, float& m, float& v) const noexcept {
    if constexpr (L2) g = g + wd * p;
    m = m * b1 + c1 * g;
    v = v * b2 + c2 * (g * g);
    float const root = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(v)));
    float const u = step_size * (m / (root * inv_sqrt_bc2 + eps));
    if constexpr (Decoupled)
      p -= lr_wd * p + u;
    else
      p -= u;
  }

  template <bool L2, bool Decoupled>
  __attribute__((target("avx2"))) void core_avx2_impl(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                                      float* SLUICE_RESTRICT mm, float* SLUICE_RESTRICT vv,
                                                      std::size_t n) const noexcept {
    lanes const c = make_lanes();
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 pv = _mm256_loadu_ps(p + i), mv = _mm256_loadu_ps(mm + i), vv8 = _mm256_loadu_ps(vv + i);
      lanes8<L2, Decoupled>(c, pv, _mm256_loadu_ps(g + i), mv, vv8);
      _mm256_storeu_ps(mm + i, mv);
      _mm256_storeu_ps(vv + i, vv8);
      _mm256_storeu_ps(p + i, pv);
    }
    for (; i < n; ++i) lane1<L2, Decoupled>(p[i], g[i], mm[i], vv[i]);
  }

  void core_avx2(float* p, float const* g, float* mm, float* vv, std::size_t n) const noexcept {
    if (l2)
      core_avx2_impl<true, false>(p, g, mm, vv, n);
    else if (decoupled)
      core_avx2_impl<false, true>(p, g, mm, vv, n);
    else
      core_avx2_impl<false, false>(p, g, mm, vv, n);
  }

  /// Eight 16-bit lanes of x (half 0: low, 1: high) widened to 32 bits.
  __attribute__((target("avx2"), always_inline)) static inline __m256i widen(__m256i x, int half) noexcept {
    return _mm256_cvtepu16_epi32(half == 0 ? _mm256_castsi256_si128(x) : _mm256_extracti128_si256(x, 1));
  }

  /// bf16 moments in one pass: widen m and v, step, and store them with stochastic rounding
  /// (bf16_stochastic with the random byte `rnd[i] & 0xff` for m and `rnd[i] >> 8` for v, as
  /// run_contiguous's portable path draws them), reading and writing each array once.
  template <bool L2, bool Decoupled>
  __attribute__((target("avx2"))) void core_bf16_avx2_impl(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                                           std::uint16_t* SLUICE_RESTRICT mb,
                                                           std::uint16_t* SLUICE_RESTRICT vb,
                                                           std::uint16_t const* SLUICE_RESTRICT rnd,
                                                           std::size_t n) const noexcept {
    lanes const c = make_lanes();
    __m256i const abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    __m256i const sign = _mm256_set1_epi32(static_cast<int>(0x80000000u)), qnan = _mm256_set1_epi32(0x7fc00000);
    __m256i const low8 = _mm256_set1_epi32(0xff);
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m256i const r16 = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(rnd + i));
      __m256i const m16 = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(mb + i));
      __m256i const v16 = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(vb + i));
      __m256i mout[2], vout[2];
      for (int h = 0; h < 2; ++h) {
        __m256 pv = _mm256_loadu_ps(p + i + 8 * h);
        __m256 mv = _mm256_castsi256_ps(_mm256_slli_epi32(widen(m16, h), 16));
        __m256 vv8 = _mm256_castsi256_ps(_mm256_slli_epi32(widen(v16, h), 16));
        lanes8<L2, Decoupled>(c, pv, _mm256_loadu_ps(g + i + 8 * h), mv, vv8);
        _mm256_storeu_ps(p + i + 8 * h, pv);
        __m256i const r = widen(r16, h);
        // bf16_stochastic: add the random byte below bit 16 (random >> 16 of a word whose top byte
        // is it), quiet NaNs, keep the top half.
        __m256i const add_m = _mm256_slli_epi32(_mm256_and_si256(r, low8), 8);
        __m256i const add_v = _mm256_and_si256(r, _mm256_set1_epi32(0xff00));
        __m256i const xs[2] = {_mm256_castps_si256(mv), _mm256_castps_si256(vv8)};
        __m256i const adds[2] = {add_m, add_v};
        __m256i outs[2];
        for (int j = 0; j < 2; ++j) {
          __m256i const bits = xs[j];
          __m256i const is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), inf);
          __m256i const nan = _mm256_or_si256(_mm256_and_si256(bits, sign), qnan);
          __m256i const rounded = _mm256_add_epi32(bits, adds[j]);
          outs[j] = _mm256_srai_epi32(_mm256_blendv_epi8(rounded, nan, is_nan), 16);
        }
        mout[h] = outs[0];
        vout[h] = outs[1];
      }
      // packs works within 128-bit lanes: [a0 b0 | a1 b1] -> permute to [a0 a1 b0 b1].
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(mb + i),
                          _mm256_permute4x64_epi64(_mm256_packs_epi32(mout[0], mout[1]), 0xd8));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(vb + i),
                          _mm256_permute4x64_epi64(_mm256_packs_epi32(vout[0], vout[1]), 0xd8));
    }
    for (; i < n; ++i) {
      float m = bf16_to_float(mb[i]), v = bf16_to_float(vb[i]);
      lane1<L2, Decoupled>(p[i], g[i], m, v);
      std::uint32_t const r = rnd[i];
      mb[i] = bf16_stochastic(m, (r << 24) & 0xff000000u);
      vb[i] = bf16_stochastic(v, (r << 16) & 0xff000000u);
    }
  }

  void core_bf16_avx2(float* p, float const* g, std::uint16_t* mb, std::uint16_t* vb, std::uint16_t const* rnd,
                      std::size_t n) const noexcept {
    if (l2)
      core_bf16_avx2_impl<true, false>(p, g, mb, vb, rnd, n);
    else if (decoupled)
      core_bf16_avx2_impl<false, true>(p, g, mb, vb, rnd, n);
    else
      core_bf16_avx2_impl<false, false>(p, g, mb, vb, rnd, n);
  }
#endif

  /// Replays steps last[i]+1 .. target with zero gradient (the geometric approximation, see
  /// docs/optim.md): m and v decay exactly (b1^k, b2^k), AdamW's decoupled decay is exact, and the
  /// parameter moves by this step's update of (m, v) times sum_{j=1..k} (b1 / sqrt(b2))^j, which is
  /// exact when eps = 0 and the bias corrections have converged to 1.
  void catch_up(float* p, float* const* m, std::uint32_t const* last, std::size_t n,
                std::uint64_t target) const noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      if (last[i] >= target) continue;
      auto const k = static_cast<double>(target - last[i]);
      double pi = p[i];
      if (decoupled) pi *= std::pow(decay_d, k);
      double const mi = m[0][i], vi = m[1][i];
      if (mi != 0) {
        double const base = step_size_d * mi / (std::sqrt(vi) * inv_sqrt_bc2_d + eps_d);
        double const geo = ratio == 1 ? k : ratio * (1 - std::pow(ratio, k)) / (1 - ratio);
        pi -= base * geo;
      }
      m[0][i] = static_cast<float>(mi * std::pow(b1_d, k));
      m[1][i] = static_cast<float>(vi * std::pow(b2_d, k));
      p[i] = static_cast<float>(pi);
    }
  }
};

}  // namespace sluice::detail::optim
