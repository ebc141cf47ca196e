// The replay of sparse_mode::catch_up on one element: the steps an element skipped since it was
// last touched, brought up to date with zero gradient. One definition, plain C++ on the host and
// __host__ __device__ under nvcc: the CPU optimizers (optim/detail/adam_kernel.hpp,
// sgd_kernel.hpp) and the CUDA kernels (cuda/optim.cuh) call the same code, in double, with each
// operation rounded on its own (core/detail/host_device.hpp).
#pragma once

#include <cstdint>

#include <sluice/core/detail/host_device.hpp>

namespace sluice {

/// sparse_mode::catch_up of sluice::adam and adamw on one element: the steps last + 1 .. target
/// skipped since the element was last touched are replayed with zero gradient by the CPU's
/// geometric approximation (docs/optim.md), in double and in the CPU's order: m and v decay by
/// beta1^k and beta2^k, AdamW's decay is exact, p moves by this step's update of (m, v) times
/// sum_{j=1..k} (beta1 / sqrt(beta2))^j. The bits are the CPU's where pow is (on the host always).
struct adam_catch_up {
  double step_size = 0, inv_sqrt_bc2 = 0, eps = 0, b1 = 0, b2 = 0, decay = 1, ratio = 0;
  std::uint64_t t = 0;  ///< the step whose constants these are
  bool decoupled = false;

  /// From `policy.kernel(t)` of sluice::adam or adamw.
  template <class K>
  static adam_catch_up from(K const& k) noexcept {
    return {k.step_size_d, k.inv_sqrt_bc2_d, k.eps_d, k.b1_d, k.b2_d, k.decay_d, k.ratio, k.t, k.decoupled};
  }

  /// Brings p, m, v (moments widened to float) from step `last` to `target`; nothing when last >= target.
  SLUICE_HOST_DEVICE void operator()(float& p, float& m, float& v, std::uint64_t last,
                                     std::uint64_t target) const noexcept {
    using namespace detail::ieee;
    if (last >= target) return;
    auto const k = static_cast<double>(target - last);
    double pi = p;
    if (decoupled) pi = dmul(pi, dpow(decay, k));
    double const mi = m, vi = v;
    if (mi != 0) {
      double const base = ddiv(dmul(step_size, mi), dadd(dmul(dsqrt(vi), inv_sqrt_bc2), eps));
      double const geo = ratio == 1 ? k : ddiv(dmul(ratio, dsub(1, dpow(ratio, k))), dsub(1, ratio));
      pi = dsub(pi, dmul(base, geo));
    }
    m = static_cast<float>(dmul(mi, dpow(b1, k)));
    v = static_cast<float>(dmul(vi, dpow(b2, k)));
    p = static_cast<float>(pi);
  }
};

/// sparse_mode::catch_up of sluice::sgd on one element: with zero gradient a step is linear in
/// (p, b), so the k skipped steps are one 2x2 matrix power (repeated squaring in double; the
/// tensor's first step has its own map), exactly the CPU's operations.
struct sgd_catch_up {
  /// [[a, b], [c, d]] acting on (p, b).
  struct map {
    double a = 1, b = 0, c = 0, d = 1;
    SLUICE_HOST_DEVICE map then(map const& y) const noexcept {  // *this * y
      using namespace detail::ieee;
      return {dadd(dmul(a, y.a), dmul(b, y.c)), dadd(dmul(a, y.b), dmul(b, y.d)), dadd(dmul(c, y.a), dmul(d, y.c)),
              dadd(dmul(c, y.b), dmul(d, y.d))};
    }
    SLUICE_HOST_DEVICE map pow(std::uint64_t k) const noexcept {
      map result{}, base = *this;
      while (k != 0) {
        if (k & 1) result = result.then(base);
        base = base.then(base);
        k >>= 1;
      }
      return result;
    }
  };
  map regular{}, initial{};
  std::uint64_t t = 0;  ///< the step whose constants these are
  bool momentum = false;

  /// From `policy.kernel(t)` of sluice::sgd.
  template <class K>
  static sgd_catch_up from(K const& k) noexcept {
    return {{k.regular.a, k.regular.b, k.regular.c, k.regular.d},
            {k.initial.a, k.initial.b, k.initial.c, k.initial.d},
            k.t,
            k.moments != 0};
  }

  /// Brings p and the momentum buffer entry b (widened to float; untouched without momentum) from
  /// step `last` to `target`; nothing when last >= target.
  SLUICE_HOST_DEVICE void operator()(float& p, float& b, std::uint64_t last, std::uint64_t target) const noexcept {
    using namespace detail::ieee;
    if (last >= target) return;
    std::uint64_t k = target - last;
    map a{};
    if (last == 0) {
      a = initial;
      --k;
    }
    a = regular.pow(k).then(a);
    double const pi = p, bi = momentum ? static_cast<double>(b) : 0.0;
    p = static_cast<float>(dadd(dmul(a.a, pi), dmul(a.b, bi)));
    if (momentum) b = static_cast<float>(dadd(dmul(a.c, pi), dmul(a.d, bi)));
  }
};

}  // namespace sluice
