// The same inputs through torch::optim (libtorch) and sluice: dense Adam, AdamW and SGD agree to
// the reference tolerance, and lazy sparse Adam agrees with torch's SparseAdam semantics.
// glog (through torch) defines CHECK; this file uses the DOCTEST_-prefixed assertion names.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <torch/torch.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <sluice/optim/all.hpp>

#include "common.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr std::size_t n_elems = 1000;
constexpr int steps = 100;

torch::Tensor tensor_of(std::vector<float> const& v) {
  return torch::from_blob(const_cast<float*>(v.data()), {static_cast<long>(v.size())}, torch::kFloat).clone();
}

std::vector<float> vector_of(torch::Tensor const& t) {
  auto c = t.contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

// Runs `o` and the torch optimizer made by `make` on the same parameters and gradients.
template <class O, class Make>
double compare(O const& o, Make make) {
  auto p = random_floats(n_elems, 1);
  auto tp = tensor_of(p).set_requires_grad(true);
  auto opt = make(std::vector<torch::Tensor>{tp});
  optimizer_state<O> s(o, n_elems);
  for (int t = 0; t < steps; ++t) {
    auto const g = random_floats(n_elems, 100 + static_cast<std::uint32_t>(t), 0.5f);
    sluice::step(o, s, p, g);
    tp.mutable_grad() = tensor_of(g);
    opt.step();
  }
  return relative_error(p, vector_of(tp.detach()));
}

}  // namespace

TEST_CASE("dense adam agrees with torch::optim::Adam") {
  DOCTEST_CHECK(compare(adam{.lr = 1e-2},
                        [](auto ps) { return torch::optim::Adam(ps, torch::optim::AdamOptions(1e-2)); }) <= 1e-6);
  DOCTEST_CHECK(
      compare(adam{.lr = 1e-3, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1}, [](auto ps) {
        return torch::optim::Adam(ps, torch::optim::AdamOptions(1e-3).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1));
      }) <= 1e-6);
}

TEST_CASE("dense adamw agrees with torch::optim::AdamW") {
  // lr * wd = 2^-14: torch's float factor 1 - lr * wd is then exact (sluice avoids that rounding).
  double const lr = 0x1p-10, wd = 0x1p-4;
  DOCTEST_CHECK(compare(adamw{.lr = lr, .weight_decay = wd}, [&](auto ps) {
                  return torch::optim::AdamW(ps, torch::optim::AdamWOptions(lr).weight_decay(wd));
                }) <= 1e-6);
}

TEST_CASE("dense sgd agrees with torch::optim::SGD") {
  DOCTEST_CHECK(
      compare(sgd{.lr = 0.01}, [](auto ps) { return torch::optim::SGD(ps, torch::optim::SGDOptions(0.01)); }) <= 1e-6);
  DOCTEST_CHECK(compare(sgd{.lr = 0.01, .momentum = 0.9, .dampening = 0.2, .weight_decay = 1e-3}, [](auto ps) {
                  return torch::optim::SGD(
                      ps, torch::optim::SGDOptions(0.01).momentum(0.9).dampening(0.2).weight_decay(1e-3));
                }) <= 1e-6);
  DOCTEST_CHECK(compare(sgd{.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}, [](auto ps) {
                  return torch::optim::SGD(
                      ps, torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-3).nesterov(true));
                }) <= 1e-6);
}

TEST_CASE("lazy sparse adam agrees with torch SparseAdam semantics") {
  // libtorch has no SparseAdam; this is torch/optim/_functional.py sparse_adam written with
  // tensor ops: only the gradient's indices update m, v and p; the step count is per tensor.
  // SparseAdam adds eps to sqrt(v) before bias correction (sluice follows torch.optim.Adam), a
  // difference far below the tolerance for the usual eps.
  double const lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  auto p = random_floats(n_elems, 3);
  auto tp = tensor_of(p);
  auto m = torch::zeros({static_cast<long>(n_elems)}), v = torch::zeros({static_cast<long>(n_elems)});
  adam const o{.lr = lr};
  optimizer_state<adam> s(o, n_elems);
  std::vector<bool> touched(n_elems, false);
  auto const p0 = p;
  for (int t = 1; t <= steps; ++t) {
    auto const g = make_sparse(n_elems, 0.05, 300 + static_cast<std::uint32_t>(t));
    sluice::step(o, s, p, sparse_view<float const>{g.indices, g.values, n_elems, 1});
    std::vector<long> idx(g.indices.begin(), g.indices.end());
    for (auto i : g.indices) touched[i] = true;
    auto const ti = torch::from_blob(idx.data(), {static_cast<long>(idx.size())}, torch::kLong).clone();
    auto const gv = tensor_of(g.values);
    auto const old_m = m.index_select(0, ti), old_v = v.index_select(0, ti);
    auto const m_upd = (gv - old_m) * (1 - b1);
    auto const v_upd = (gv.pow(2) - old_v) * (1 - b2);
    m.index_add_(0, ti, m_upd);
    v.index_add_(0, ti, v_upd);
    auto const numer = m_upd + old_m;
    auto const denom = (v_upd + old_v).sqrt() + eps;
    double const bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    double const step_size = lr * std::sqrt(bc2) / bc1;
    tp.index_add_(0, ti, -step_size * (numer / denom));
  }
  auto const q = vector_of(tp);
  DOCTEST_CHECK(relative_error(p, q) <= 1e-6);
  for (std::size_t i = 0; i < n_elems; ++i)
    if (!touched[i]) DOCTEST_REQUIRE(q[i] == p0[i]);
  for (std::size_t i = 0; i < n_elems; i += 37)
    DOCTEST_CHECK(s.moment(0, i) == doctest::Approx(m[static_cast<long>(i)].item<float>()).epsilon(1e-5));
}
