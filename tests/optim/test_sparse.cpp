// Sparse steps: lazy against the reference, catch_up SGD against a dense run with zero gradients,
// catch_up Adam against the documented approximation, and the block path against the element path.
#include <doctest/doctest.h>

#include <vector>

#include <sluice/optim/all.hpp>

#include "common.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr std::size_t n_elems = 997;

template <class O>
sparse_view<float const> view_of(sparse_grad const& g, std::size_t extent, std::size_t block = 1) {
  return {g.indices, g.values, extent, block};
}

}  // namespace

TEST_CASE("lazy sparse adam and adamw update only touched entries, as the reference") {
  for (bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    auto p = random_floats(n_elems, 1);
    auto const p0 = p;
    adam_reference ref{.lr = 1e-2, .weight_decay = 0.01, .decoupled = decoupled};
    ref.init(widen(p));
    adam const a{.lr = 1e-2, .weight_decay = 0.01};
    adamw const w{.lr = 1e-2, .weight_decay = 0.01};
    optimizer_state<adam> sa(a, n_elems);
    optimizer_state<adamw> sw(w, n_elems);
    std::vector<bool> touched(n_elems, false);
    for (int t = 0; t < 100; ++t) {
      auto const g = make_sparse(n_elems, 0.05, 1000 + static_cast<std::uint32_t>(t));
      if (decoupled)
        sluice::step(w, sw, p, view_of<adamw>(g, n_elems));
      else
        sluice::step(a, sa, p, view_of<adam>(g, n_elems));
      ref.step(g.entries);
      for (auto i : g.indices) touched[i] = true;
    }
    CHECK(relative_error(p, ref.p) <= 1e-6);
    for (std::size_t i = 0; i < n_elems; ++i)
      if (!touched[i]) REQUIRE(p[i] == p0[i]);
  }
}

TEST_CASE("lazy sparse sgd matches the reference") {
  auto p = random_floats(n_elems, 2);
  sgd const o{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true};
  sgd_reference ref{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true};
  ref.init(widen(p));
  optimizer_state<sgd> s(o, n_elems);
  for (int t = 0; t < 100; ++t) {
    auto const g = make_sparse(n_elems, 0.1, 2000 + static_cast<std::uint32_t>(t));
    sluice::step(o, s, p, view_of<sgd>(g, n_elems));
    ref.step(g.entries);
  }
  CHECK(relative_error(p, ref.p) <= 1e-6);
}

TEST_CASE("catch_up sgd momentum equals a dense run with zero gradients at untouched entries") {
  std::vector<sgd> const configs = {
      {.lr = 0.05, .momentum = 0.9, .sparse = sparse_mode::catch_up},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.5, .weight_decay = 1e-2, .sparse = sparse_mode::catch_up},
      {.lr = 0.05, .momentum = 0.8, .weight_decay = 1e-2, .nesterov = true, .sparse = sparse_mode::catch_up},
      {.lr = 0.05, .weight_decay = 1e-2, .sparse = sparse_mode::catch_up},
  };
  for (auto const& o : configs) {
    CAPTURE(o);
    auto p = random_floats(n_elems, 3);
    auto q = p;
    sgd dense_o = o;
    dense_o.sparse = sparse_mode::lazy;
    optimizer_state<sgd> s(o, n_elems), d(dense_o, n_elems);
    sgd_reference ref{.lr = o.lr,
                      .momentum = o.momentum,
                      .dampening = o.dampening,
                      .weight_decay = o.weight_decay,
                      .nesterov = o.nesterov};
    ref.init(widen(p));
    for (int t = 0; t < 60; ++t) {
      auto const g = make_sparse(n_elems, 0.05, 3000 + static_cast<std::uint32_t>(t));
      sluice::step(o, s, p, view_of<sgd>(g, n_elems));
      sluice::step(dense_o, d, q, g.dense);
      ref.step(widen(g.dense));
    }
    sluice::flush(o, s, p);
    CHECK(relative_error(p, q) <= 1e-6);
    CHECK(relative_error(p, ref.p) <= 1e-6);
    CHECK(max_relative_error(p, ref.p) <= 1e-4);
    for (std::size_t i = 0; i < n_elems; ++i) REQUIRE(s.last_step(i) == 60);
    if (o.momentum != 0)
      for (std::size_t i = 0; i < n_elems; ++i) REQUIRE(s.moment(0, i) == doctest::Approx(ref.b[i]).epsilon(1e-4));
  }
}

TEST_CASE("catch_up: a dense step after sparse steps catches up first") {
  sgd const o{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .sparse = sparse_mode::catch_up};
  auto p = random_floats(n_elems, 4);
  sgd_reference ref{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2};
  ref.init(widen(p));
  optimizer_state<sgd> s(o, n_elems);
  for (int t = 0; t < 30; ++t) {
    auto const g = make_sparse(n_elems, 0.05, 4000 + static_cast<std::uint32_t>(t));
    if (t % 10 == 9) {
      auto const dg = random_floats(n_elems, 4500 + static_cast<std::uint32_t>(t));
      sluice::step(o, s, p, dg);
      ref.step(widen(dg));
    } else {
      sluice::step(o, s, p, view_of<sgd>(g, n_elems));
      ref.step(widen(g.dense));
    }
  }
  sluice::flush(o, s, p);
  CHECK(relative_error(p, ref.p) <= 1e-6);
}

TEST_CASE("catch_up adam follows the documented geometric approximation") {
  for (bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    auto p = random_floats(n_elems, 5);
    adam_reference ref{.lr = 1e-2, .weight_decay = decoupled ? 0.1 : 0.0, .decoupled = decoupled, .catch_up = true};
    ref.init(widen(p));
    adam const a{.lr = 1e-2, .sparse = sparse_mode::catch_up};
    adamw const w{.lr = 1e-2, .weight_decay = 0.1, .sparse = sparse_mode::catch_up};
    optimizer_state<adam> sa(a, n_elems);
    optimizer_state<adamw> sw(w, n_elems);
    for (int t = 0; t < 80; ++t) {
      auto const g = make_sparse(n_elems, 0.1, 5000 + static_cast<std::uint32_t>(t));
      if (decoupled)
        sluice::step(w, sw, p, view_of<adamw>(g, n_elems));
      else
        sluice::step(a, sa, p, view_of<adam>(g, n_elems));
      ref.step(g.entries);
    }
    if (decoupled)
      sluice::flush(w, sw, p);
    else
      sluice::flush(a, sa, p);
    ref.flush();
    CHECK(relative_error(p, ref.p) <= 1e-6);
  }
}

TEST_CASE("catch_up adam approximates a dense run with zero gradients once bias corrections settle") {
  // eps = 0 and a long warm-up: the approximation is then nearly exact.
  std::size_t const n = 256;
  adam const dense_o{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 0};
  adam const o{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 0, .sparse = sparse_mode::catch_up};
  auto p = random_floats(n, 6);
  auto q = p;
  optimizer_state<adam> s(o, n), d(dense_o, n);
  for (int t = 0; t < 4000; ++t) {
    auto const g = random_floats(n, 6000 + static_cast<std::uint32_t>(t % 50), 1e-2f);
    sluice::step(o, s, p, g);
    sluice::step(dense_o, d, q, g);
  }
  auto const start = q;
  for (int t = 0; t < 40; ++t) {
    auto const g = make_sparse(n, 0.2, 7000 + static_cast<std::uint32_t>(t));
    sluice::step(o, s, p, sparse_view<float const>{g.indices, g.values, n, 1});
    sluice::step(dense_o, d, q, g.dense);
  }
  sluice::flush(o, s, p);
  std::vector<double> mp(n), mq(n);
  for (std::size_t i = 0; i < n; ++i)
    mp[i] = p[i] - static_cast<double>(start[i]), mq[i] = q[i] - static_cast<double>(start[i]);
  CHECK(relative_error(mp, mq) <= 1e-2);
}

TEST_CASE("block fast path equals the element path bit for bit") {
  struct cfg {
    std::size_t block;
    element_type states;
    sparse_mode mode;
  };
  std::vector<cfg> const cfgs = {
      {16, element_type::f32, sparse_mode::lazy},     {7, element_type::f32, sparse_mode::lazy},
      {100, element_type::f32, sparse_mode::lazy},    {16, element_type::bf16, sparse_mode::lazy},
      {7, element_type::f32, sparse_mode::catch_up},  {300, element_type::bf16, sparse_mode::catch_up},
      {16, element_type::bf16, sparse_mode::catch_up}};
  for (auto const& c : cfgs) {
    CAPTURE(c.block);
    CAPTURE(c.mode);
    adam const o{.lr = 1e-2, .weight_decay = 1e-3, .sparse = c.mode, .state_type = c.states, .seed = 9};
    sgd const so{.lr = 1e-2, .momentum = 0.9, .weight_decay = 1e-3, .sparse = c.mode, .state_type = c.states};
    auto pb = random_floats(n_elems, 7);  // n_elems is not a multiple of the block: partial last block
    auto pe = pb, qb = pb, qe = pb;
    std::vector<sluice::bfloat16> shb(n_elems), she(n_elems);
    optimizer_state<adam> sb(o, n_elems, 4), se(o, n_elems, 4);
    optimizer_state<sgd> tb(so, n_elems, 4), te(so, n_elems, 4);
    for (int t = 0; t < 25; ++t) {
      auto const g = make_sparse(n_elems, 0.3, 8000 + static_cast<std::uint32_t>(t), c.block);
      auto const ge = to_elements(g);
      sparse_view<float const> const vb{g.indices, g.values, n_elems, c.block};
      sparse_view<float const> const ve{ge.indices, ge.values, n_elems, 1};
      sluice::step(o, sb, pb, vb, std::span<sluice::bfloat16>(shb));
      sluice::step(o, se, pe, ve, std::span<sluice::bfloat16>(she));
      sluice::step(so, tb, qb, vb);
      sluice::step(so, te, qe, ve);
    }
    CHECK(pb == pe);
    CHECK(sb == se);
    CHECK(qb == qe);
    CHECK(tb == te);
    for (std::size_t i = 0; i < n_elems; ++i)
      REQUIRE(std::bit_cast<std::uint16_t>(shb[i]) == std::bit_cast<std::uint16_t>(she[i]));
  }
}

TEST_CASE("the block path over every block equals the dense step") {
  adam const o{.lr = 1e-2, .state_type = element_type::bf16, .seed = 5};
  std::size_t const b = 16, blocks = (n_elems + b - 1) / b;
  std::vector<std::uint32_t> idx(blocks);
  for (std::size_t j = 0; j < blocks; ++j) idx[j] = static_cast<std::uint32_t>(j);
  auto pd = random_floats(n_elems, 8);
  auto ps = pd;
  optimizer_state<adam> sd(o, n_elems), ss(o, n_elems);
  for (int t = 0; t < 5; ++t) {
    auto const g = random_floats(n_elems, 9000 + static_cast<std::uint32_t>(t));
    std::vector<float> padded(blocks * b, 0.0f);
    std::copy(g.begin(), g.end(), padded.begin());
    sluice::step(o, sd, pd, g);
    sluice::step(o, ss, ps, sparse_view<float const>{idx, padded, n_elems, b});
  }
  CHECK(pd == ps);
  CHECK(sd == ss);
}

TEST_CASE("64-bit indices and sparse shadows touch only the listed entries") {
  adam const o{.lr = 1e-2};
  auto p = random_floats(n_elems, 10);
  auto q = p;
  std::vector<sluice::half> shadow(n_elems, sluice::half(7.0f));
  optimizer_state<adam> s(o, n_elems), s2(o, n_elems);
  auto const g = make_sparse(n_elems, 0.1, 10000);
  std::vector<std::uint64_t> idx64(g.indices.begin(), g.indices.end());
  sluice::step(o, s, p, sparse_view<float const, std::uint64_t>{idx64, g.values, n_elems, 1},
               std::span<sluice::half>(shadow));
  sluice::step(o, s2, q, sparse_view<float const>{g.indices, g.values, n_elems, 1});
  CHECK(p == q);
  std::vector<bool> touched(n_elems, false);
  for (auto i : g.indices) touched[i] = true;
  for (std::size_t i = 0; i < n_elems; ++i) {
    if (touched[i])
      REQUIRE(static_cast<float>(shadow[i]) == static_cast<float>(sluice::half(p[i])));
    else
      REQUIRE(static_cast<float>(shadow[i]) == 7.0f);
  }
}

TEST_CASE("sparse steps validate their gradient before changing anything") {
  adam const o{};
  auto p = random_floats(n_elems, 11);
  auto const p0 = p;
  optimizer_state<adam> s(o, n_elems, 12);
  std::vector<std::uint32_t> bad = {5, 3};
  std::vector<float> vals = {1, 2};
  CHECK_THROWS_AS(sluice::step(o, s, p, sparse_view<float const>{bad, vals, n_elems, 1}), sluice::error);
  std::vector<std::uint32_t> out = {5, static_cast<std::uint32_t>(n_elems)};
  CHECK_THROWS_AS(sluice::step(o, s, p, sparse_view<float const>{out, vals, n_elems, 1}), sluice::error);
  std::vector<std::uint32_t> ok = {5, 6};
  CHECK_THROWS_AS(sluice::step(o, s, p, sparse_view<float const>{ok, vals, n_elems + 1, 1}), sluice::error);
  CHECK(s.step() == 0);
  CHECK(p == p0);
}
