// The Adam/AdamW fp32 step written once over lanes: adam_lanes<L> for each level L, stamped by
// core/detail/simd_stamp.hpp from adam_kernel.hpp (no include guard; alone it includes that).
#ifndef SLUICE_SIMD_LEVEL
#include <sluice/optim/detail/adam_kernel.hpp>
#else

namespace sluice::detail::optim {

template <>
struct adam_lanes<SLUICE_SIMD_LEVEL> {
  using V = simd_detail::vf32<SLUICE_SIMD_LEVEL>;

  /// The per-step constants, one in every lane.
  struct consts {
    V b1, c1, b2, c2, wd, step, inv, eps, lr_wd;
  };

  static SLUICE_SIMD_INLINE consts make(adam_scalars const& k) noexcept {
    return {V::set(k.b1),        V::set(k.c1),           V::set(k.b2),  V::set(k.c2),   V::set(k.wd),
            V::set(k.step_size), V::set(k.inv_sqrt_bc2), V::set(k.eps), V::set(k.lr_wd)};
  }

  /// One step on width elements (torch's operations in torch's order; every product rounded).
  /// AdamW's decay joins the update: p - (lr wd p + step m / denom) rounds p once per step, where
  /// torch's p * (1 - lr wd) rounds 1 - lr wd to float (up to 3e-8 relative error, every step)
  /// and rounds p twice.
  template <bool L2, bool Decoupled>
  static SLUICE_SIMD_INLINE void step(consts const& c, V& p, V g, V& m, V& v) noexcept {
    if constexpr (L2) g = g + c.wd * p;
    m = m * c.b1 + c.c1 * g;
    v = v * c.b2 + c.c2 * (g * g);
    V const u = c.step * (m / (sqrt(v) * c.inv + c.eps));
    if constexpr (Decoupled)
      p = p - (c.lr_wd * p + u);
    else
      p = p - u;
  }

  /// The update of n contiguous elements in place: one pass reads p, g, m, v once and writes
  /// them once; the tail goes through partial lanes.
  template <bool L2, bool Decoupled>
  static SLUICE_SIMD_INLINE void run(consts const& c, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                     float* SLUICE_RESTRICT mm, float* SLUICE_RESTRICT vv, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + V::width <= n; i += V::width) {
      V pv = V::load(p + i), mv = V::load(mm + i), vv1 = V::load(vv + i);
      step<L2, Decoupled>(c, pv, V::load(g + i), mv, vv1);
      V::store(mm + i, mv);
      V::store(vv + i, vv1);
      V::store(p + i, pv);
    }
    if (std::size_t const k = n - i; k != 0) {
      V pv = V::load_n(p + i, k), mv = V::load_n(mm + i, k), vv1 = V::load_n(vv + i, k);
      step<L2, Decoupled>(c, pv, V::load_n(g + i, k), mv, vv1);
      V::store_n(mm + i, mv, k);
      V::store_n(vv + i, vv1, k);
      V::store_n(p + i, pv, k);
    }
  }

  template <bool L2, bool Decoupled>
  static void dense(adam_scalars const& k, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                    float* SLUICE_RESTRICT mm, float* SLUICE_RESTRICT vv, std::size_t n) noexcept {
    run<L2, Decoupled>(make(k), p, g, mm, vv, n);
  }

  /// A block-sparse step in place (no catch-up): block j < count is elements idx[j] * b .. +
  /// min(b, n - idx[j] * b) of p, mm, vv, with gradient vals[j * b ..]; the lines of block
  /// j + ahead are prefetched.
  template <bool L2, bool Decoupled, class Index>
  static void blocks(adam_scalars const& k, float* SLUICE_RESTRICT p, float* SLUICE_RESTRICT mm,
                     float* SLUICE_RESTRICT vv, float const* SLUICE_RESTRICT vals, Index const* SLUICE_RESTRICT idx,
                     std::size_t count, std::size_t b, std::size_t n, std::size_t ahead) noexcept {
    consts const c = make(k);
    for (std::size_t j = 0; j < count; ++j) {
      if (j + ahead < count) {
        std::size_t const next = static_cast<std::size_t>(idx[j + ahead]) * b, bytes = std::min(b, n - next) * 4;
        prefetch_lines(p + next, bytes);
        prefetch_lines(mm + next, bytes);
        prefetch_lines(vv + next, bytes);
      }
      std::size_t const base = static_cast<std::size_t>(idx[j]) * b;
      run<L2, Decoupled>(c, p + base, vals + j * b, mm + base, vv + base, std::min(b, n - base));
    }
  }
};

}  // namespace sluice::detail::optim

#endif
