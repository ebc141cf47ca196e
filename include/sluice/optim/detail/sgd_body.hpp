// The SGD step (momentum, dampening, Nesterov, weight decay) written once over lanes: sgd_lanes<L>
// for each level L, stamped by core/detail/simd_stamp.hpp from sgd_kernel.hpp (no include guard;
// alone it includes that).
#ifndef SLUICE_SIMD_LEVEL
#include <sluice/optim/detail/sgd_kernel.hpp>
#else

namespace sluice::detail::optim {

template <>
struct sgd_lanes<SLUICE_SIMD_LEVEL> {
  using V = detail::simd::vf32<SLUICE_SIMD_LEVEL>;

  /// torch.optim.SGD on width elements: d = g + wd p; b = d (first step) or mu b + (1 - dampening) d;
  /// d = d + mu b (Nesterov) or b; p = p - lr d. Every product rounded.
  template <bool Momentum, bool Wd, bool First, bool Nesterov>
  static SLUICE_SIMD_INLINE void step(sgd_scalars const& s, V& p, V d, V& b) noexcept {
    V const l = V::set(s.lr), w = V::set(s.wd), m = V::set(s.mu), cc = V::set(s.c);
    if constexpr (Wd) d = d + w * p;
    if constexpr (Momentum) {
      if constexpr (First)
        b = d;
      else
        b = b * m + cc * d;
      if constexpr (Nesterov)
        d = d + m * b;
      else
        d = b;
    }
    p = p - l * d;
  }

  /// One tile of n elements in place (b: the momentum buffer, unused without momentum).
  template <bool Momentum, bool Wd, bool First, bool Nesterov>
  static SLUICE_SIMD_INLINE void run(sgd_scalars const& s, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                     float* SLUICE_RESTRICT b, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + V::width <= n; i += V::width) {
      V pv = V::load(p + i), bv = V::set(0.0f);
      if constexpr (Momentum && !First) bv = V::load(b + i);
      step<Momentum, Wd, First, Nesterov>(s, pv, V::load(g + i), bv);
      if constexpr (Momentum) V::store(b + i, bv);
      V::store(p + i, pv);
    }
    if (std::size_t const k = n - i; k != 0) {
      V pv = V::load_n(p + i, k), bv = V::set(0.0f);
      if constexpr (Momentum && !First) bv = V::load_n(b + i, k);
      step<Momentum, Wd, First, Nesterov>(s, pv, V::load_n(g + i, k), bv);
      if constexpr (Momentum) V::store_n(b + i, bv, k);
      V::store_n(p + i, pv, k);
    }
  }

  template <bool Momentum, bool Wd, bool First, bool Nesterov>
  static void step_tile(sgd_scalars const& s, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                        float* SLUICE_RESTRICT b, std::size_t n) noexcept {
    run<Momentum, Wd, First, Nesterov>(s, p, g, b, n);
  }

  /// run over a whole range, one tile at a time inside this body (per-tile calls from
  /// run_contiguous cost 1-10 % of the streaming rate on Zen 5 at 2 threads).
  template <bool Momentum, bool Wd, bool First, bool Nesterov>
  static void step_range(sgd_scalars const& s, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                         float* SLUICE_RESTRICT b, std::size_t n) noexcept {
    for (std::size_t o = 0; o < n; o += tile)
      run<Momentum, Wd, First, Nesterov>(s, p + o, g + o, Momentum ? b + o : nullptr, std::min(tile, n - o));
  }
};

}  // namespace sluice::detail::optim

#endif
