// Double-precision scalar reference of sluice's optimizers (torch.optim formulas), dense and sparse
// (lazy / catch_up), against which the vectorized fp32 kernels are tested.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sluice::test {

/// One touched entry of a sparse step: element index and gradient.
struct ref_entry {
  std::size_t index = 0;
  double grad = 0;
};

/// Reference Adam / AdamW (decoupled = true) on double parameters.
struct adam_reference {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;
  bool catch_up = false;
  std::vector<double> p{}, m{}, v{};
  std::vector<std::uint64_t> last{};
  std::uint64_t t = 0;

  void init(std::vector<double> params) {
    p = std::move(params);
    m.assign(p.size(), 0.0);
    v.assign(p.size(), 0.0);
    last.assign(p.size(), 0);
  }

  // The documented geometric approximation of steps last+1 .. target with zero gradient, using the
  // bias corrections of step `now`.
  void replay(std::size_t i, std::uint64_t target, std::uint64_t now) {
    if (last[i] >= target) return;
    auto const k = static_cast<double>(target - last[i]);
    double const bc1 = 1 - std::pow(beta1, static_cast<double>(now));
    double const bc2 = 1 - std::pow(beta2, static_cast<double>(now));
    if (decoupled) p[i] *= std::pow(1 - lr * weight_decay, k);
    if (m[i] != 0) {
      double const r = beta1 / std::sqrt(beta2);
      double const geo = r == 1 ? k : r * (1 - std::pow(r, k)) / (1 - r);
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps) * geo;
    }
    m[i] *= std::pow(beta1, k);
    v[i] *= std::pow(beta2, k);
    last[i] = target;
  }

  void update(std::size_t i, double g) {
    double const bc1 = 1 - std::pow(beta1, static_cast<double>(t));
    double const bc2 = 1 - std::pow(beta2, static_cast<double>(t));
    if (catch_up) replay(i, t - 1, t);
    if (decoupled) p[i] *= 1 - lr * weight_decay;
    if (!decoupled) g += weight_decay * p[i];
    m[i] = beta1 * m[i] + (1 - beta1) * g;
    v[i] = beta2 * v[i] + (1 - beta2) * g * g;
    p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    last[i] = t;
  }

  void step(std::vector<double> const& g) {
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) update(i, g[i]);
  }
  void step(std::vector<ref_entry> const& touched) {
    ++t;
    for (auto const& e : touched) update(e.index, e.grad);
  }
  void flush() {
    if (!catch_up) return;
    for (std::size_t i = 0; i < p.size(); ++i) replay(i, t, t);
  }
};

/// Reference SGD as torch.optim.SGD. Sparse steps are lazy; catch_up is checked against a dense
/// run with zero gradients instead (its closed form is exact).
struct sgd_reference {
  double lr = 1e-2, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  std::vector<double> p{}, b{};
  std::uint64_t t = 0;

  void init(std::vector<double> params) {
    p = std::move(params);
    b.assign(p.size(), 0.0);
  }

  void update(std::size_t i, double g) {
    double d = g + weight_decay * p[i];
    if (momentum != 0) {
      b[i] = t == 1 ? d : momentum * b[i] + (1 - dampening) * d;
      d = nesterov ? d + momentum * b[i] : b[i];
    }
    p[i] -= lr * d;
  }

  void step(std::vector<double> const& g) {
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) update(i, g[i]);
  }
  void step(std::vector<ref_entry> const& touched) {
    ++t;
    for (auto const& e : touched) update(e.index, e.grad);
  }
};

/// ||a - b|| / ||b|| over two equally long sequences.
template <class A, class B>
double relative_error(A const& a, B const& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    double const d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// max_i |a_i - b_i| / max(|b_i|, floor).
template <class A, class B>
double max_relative_error(A const& a, B const& b, double floor = 1e-3) {
  double worst = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    double const d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    worst = std::max(worst, d / std::max(std::abs(static_cast<double>(b[i])), floor));
  }
  return worst;
}

}  // namespace sluice::test
