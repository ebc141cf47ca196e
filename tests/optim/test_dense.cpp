// Dense steps of sgd, adam and adamw against the double-precision reference over many steps,
// shadows, bf16 states and step_all.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include <sluice/optim/all.hpp>

#include "common.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr std::size_t n_elems = 1000;  // not a multiple of the tile: covers the remainder loop
constexpr int steps = 200;

template <class O>
double run_adam_like(O const& o, bool decoupled) {
  auto p = random_floats(n_elems, 1);
  adam_reference ref{.lr = o.lr,
                     .beta1 = o.beta1,
                     .beta2 = o.beta2,
                     .eps = o.eps,
                     .weight_decay = o.weight_decay,
                     .decoupled = decoupled};
  ref.init(widen(p));
  optimizer_state<O> s(o, n_elems, 3);
  for (int t = 0; t < steps; ++t) {
    auto const g = random_floats(n_elems, 100 + static_cast<std::uint32_t>(t));
    sluice::step(o, s, p, g);
    ref.step(widen(g));
  }
  CHECK(s.step() == steps);
  return relative_error(p, ref.p);
}

double run_sgd(sgd const& o) {
  auto p = random_floats(n_elems, 2);
  sgd_reference ref{.lr = o.lr,
                    .momentum = o.momentum,
                    .dampening = o.dampening,
                    .weight_decay = o.weight_decay,
                    .nesterov = o.nesterov};
  ref.init(widen(p));
  optimizer_state<sgd> s(o, n_elems);
  for (int t = 0; t < steps; ++t) {
    auto const g = random_floats(n_elems, 300 + static_cast<std::uint32_t>(t), 0.1f);
    sluice::step(o, s, p, g);
    ref.step(widen(g));
  }
  return relative_error(p, ref.p);
}

}  // namespace

TEST_CASE("adam matches the double-precision reference over many steps") {
  CHECK(run_adam_like(adam{}, false) <= 1e-6);
  CHECK(run_adam_like(adam{.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1}, false) <= 1e-6);
  CHECK(run_adam_like(adam{.lr = 1e-3, .beta1 = 0.0, .beta2 = 0.5}, false) <= 1e-6);
}

TEST_CASE("adamw matches the double-precision reference over many steps") {
  CHECK(run_adam_like(adamw{}, true) <= 1e-6);
  CHECK(run_adam_like(adamw{.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.99, .weight_decay = 0.5}, true) <= 1e-6);
}

TEST_CASE("sgd matches the double-precision reference over many steps") {
  CHECK(run_sgd(sgd{.lr = 0.01}) <= 1e-6);
  CHECK(run_sgd(sgd{.lr = 0.01, .weight_decay = 1e-2}) <= 1e-6);
  CHECK(run_sgd(sgd{.lr = 0.01, .momentum = 0.9}) <= 1e-6);
  CHECK(run_sgd(sgd{.lr = 0.01, .momentum = 0.9, .dampening = 0.3, .weight_decay = 1e-3}) <= 1e-6);
  CHECK(run_sgd(sgd{.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}) <= 1e-6);
}

TEST_CASE("a large dense step is split over threads and matches the serial result") {
  // Big enough for several chunks, so parallel_chunks splits it.
  std::size_t const n = std::size_t{1} << 19;
  auto p = random_floats(n, 5);
  auto p2 = p;
  auto const g = random_floats(n, 6);
  adam const o{.lr = 1e-2};
  optimizer_state<adam> s(o, n), s2(o, n);
  sluice::step(o, s, p, g);
  // Serial: step_all steps tensors below two chunks on one thread; compare per element instead.
  adam_reference ref{.lr = o.lr};
  ref.init(widen(p2));
  ref.step(widen(g));
  CHECK(relative_error(p, ref.p) <= 1e-6);
}

TEST_CASE("shadow parameters are the updated parameters rounded to nearest") {
  auto p = random_floats(n_elems, 9);
  auto const g = random_floats(n_elems, 10);
  std::vector<sluice::bfloat16> sb(n_elems);
  std::vector<sluice::half> sh(n_elems);
  adam const o{};
  optimizer_state<adam> s(o, n_elems);
  sluice::step(o, s, p, g, std::span<sluice::bfloat16>(sb));
  for (std::size_t i = 0; i < n_elems; ++i)
    REQUIRE(std::bit_cast<std::uint16_t>(sb[i]) == std::bit_cast<std::uint16_t>(sluice::bfloat16(p[i])));
  sluice::step(o, s, p, g, std::span<sluice::half>(sh));
  for (std::size_t i = 0; i < n_elems; ++i)
    REQUIRE(std::bit_cast<std::uint16_t>(sh[i]) == std::bit_cast<std::uint16_t>(sluice::half(p[i])));
  // The shadow path computes the same parameters as the plain path.
  auto q = random_floats(n_elems, 9);
  optimizer_state<adam> s2(o, n_elems);
  sluice::step(o, s2, q, g);
  sluice::step(o, s2, q, g);
  CHECK(q == p);
}

TEST_CASE("branch-free bf16 conversions equal the core conversions bit for bit") {
  std::mt19937 rng(3);
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.5f,
                           3.4e38f,
                           -3.4e38f,
                           1e-40f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 10000; ++i) xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  for (float x : xs) {
    auto const r = static_cast<std::uint32_t>(rng());
    REQUIRE(detail::bf16_stochastic(x, r) ==
            std::bit_cast<std::uint16_t>(from_float_stochastic<sluice::bfloat16>(x, r)));
    REQUIRE(detail::bf16_nearest(x) == std::bit_cast<std::uint16_t>(sluice::bfloat16(x)));
  }
}

TEST_CASE("vectorized Philox words equal sluice::random_stream") {
  stream_key const key{.seed = 0x1234'5678'9abc'def0ull, .rank = stream_key::shared_rank, .step = 17, .tensor = 5};
  random_stream const rs(key);
  auto const lanes = detail::philox_lanes::from(key);
  std::vector<std::uint32_t> w(4 * 100);
  lanes.words(1000, 100, w.data());
  for (std::uint64_t i = 0; i < w.size(); ++i) {
    REQUIRE(w[i] == rs.word(4000 + i));
    REQUIRE(lanes.word(4000 + i) == rs.word(4000 + i));
  }
}

TEST_CASE("bf16 moments: close to fp32, deterministic, unbiased rounding keeps small updates") {
  auto p = random_floats(n_elems, 11);
  auto p2 = p, p3 = p;
  adam const o16{.lr = 1e-3, .state_type = element_type::bf16, .seed = 42};
  adam const o32{.lr = 1e-3};
  optimizer_state<adam> s(o16, n_elems, 1), s2(o16, n_elems, 1), s32(o32, n_elems, 1);
  adam_reference ref{};
  ref.init(widen(p));
  for (int t = 0; t < 100; ++t) {
    auto const g = random_floats(n_elems, 500 + static_cast<std::uint32_t>(t));
    sluice::step(o16, s, p, g);
    sluice::step(o16, s2, p2, g);
    sluice::step(o32, s32, p3, g);
    ref.step(widen(g));
  }
  CHECK(p == p2);  // same seed, same stream: bit-identical
  CHECK(s == s2);
  // The parameters moved by ~lr per step; bf16 moments perturb each update by ~2^-8 relative.
  std::vector<double> move_ref(n_elems), move_16(n_elems);
  auto const p0 = random_floats(n_elems, 11);
  for (std::size_t i = 0; i < n_elems; ++i) {
    move_ref[i] = ref.p[i] - p0[i];
    move_16[i] = static_cast<double>(p[i]) - p0[i];
  }
  CHECK(relative_error(move_16, move_ref) <= 2e-2);
  // A different seed gives different roundings.
  adam o16b = o16;
  o16b.seed = 43;
  CHECK_FALSE(o16b == o16);
}

TEST_CASE("sgd with bf16 momentum tracks the reference") {
  auto p = random_floats(n_elems, 12);
  auto const p0 = p;
  sgd const o{.lr = 0.01, .momentum = 0.9, .state_type = element_type::bf16, .seed = 1};
  sgd_reference ref{.lr = 0.01, .momentum = 0.9};
  ref.init(widen(p));
  optimizer_state<sgd> s(o, n_elems);
  for (int t = 0; t < 50; ++t) {
    auto const g = random_floats(n_elems, 700 + static_cast<std::uint32_t>(t), 0.1f);
    sluice::step(o, s, p, g);
    ref.step(widen(g));
  }
  std::vector<double> a(n_elems), b(n_elems);
  for (std::size_t i = 0; i < n_elems; ++i) a[i] = p[i] - static_cast<double>(p0[i]), b[i] = ref.p[i] - p0[i];
  CHECK(relative_error(a, b) <= 2e-2);
}

TEST_CASE("step_all steps every tensor once, like separate steps") {
  adam const o{.lr = 1e-2};
  std::vector<std::size_t> const sizes = {1, 7, 300, 5000, std::size_t{1} << 18};
  std::vector<std::vector<float>> ps, qs, gs;
  std::vector<optimizer_state<adam>> ss, ts;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    ps.push_back(random_floats(sizes[k], 20 + static_cast<std::uint32_t>(k)));
    qs.push_back(ps.back());
    gs.push_back(random_floats(sizes[k], 40 + static_cast<std::uint32_t>(k)));
    ss.emplace_back(o, sizes[k], static_cast<std::uint32_t>(k));
    ts.emplace_back(o, sizes[k], static_cast<std::uint32_t>(k));
  }
  std::vector<tensor_step<adam>> items;
  for (std::size_t k = 0; k < sizes.size(); ++k) items.push_back({&ss[k], ps[k], gs[k]});
  for (int t = 0; t < 3; ++t) step_all(o, items);
  for (int t = 0; t < 3; ++t)
    for (std::size_t k = 0; k < sizes.size(); ++k) sluice::step(o, ts[k], qs[k], gs[k]);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    CHECK(ps[k] == qs[k]);
    CHECK(ss[k] == ts[k]);
    CHECK(ss[k].step() == 3);
  }
  // A bad item throws before any state changes.
  std::vector<float> wrong(3);
  items.push_back({&ts[0], ps[0], wrong});
  CHECK_THROWS_AS(step_all(o, items), sluice::error);
  CHECK(ss[0].step() == 3);
  items.back() = {&ss[1], ps[1], gs[1]};
  CHECK_THROWS_AS(step_all(o, items), sluice::error);  // state shared by two items
}

TEST_CASE("distinct tensors step concurrently from different threads") {
  sgd const o{.lr = 0.1, .momentum = 0.9};
  constexpr int workers = 4;
  std::vector<std::vector<float>> ps(workers), qs(workers), gs(workers);
  std::vector<optimizer_state<sgd>> ss, ts;
  for (int k = 0; k < workers; ++k) {
    ps[static_cast<std::size_t>(k)] = random_floats(4096, 60 + static_cast<std::uint32_t>(k));
    qs[static_cast<std::size_t>(k)] = ps[static_cast<std::size_t>(k)];
    gs[static_cast<std::size_t>(k)] = random_floats(4096, 80 + static_cast<std::uint32_t>(k));
    ss.emplace_back(o, 4096, static_cast<std::uint32_t>(k));
    ts.emplace_back(o, 4096, static_cast<std::uint32_t>(k));
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < workers; ++k)
    threads.emplace_back([&, k] {
      auto const u = static_cast<std::size_t>(k);
      for (int t = 0; t < 20; ++t) sluice::step(o, ss[u], ps[u], gs[u]);
    });
  for (auto& th : threads) th.join();
  for (std::size_t k = 0; k < workers; ++k) {
    for (int t = 0; t < 20; ++t) sluice::step(o, ts[k], qs[k], gs[k]);
    CHECK(ps[k] == qs[k]);
  }
}

/// f(level_t<L>{}) for every level L this CPU runs, capped by SLUICE_SIMD.
template <class F>
void for_each_level(F&& f) {
  f(sluice::detail::simd::level_t<sluice::simd::baseline>{});
#if SLUICE_HAVE_AVX2_TARGET
  if (sluice::simd_level() >= sluice::simd::avx2) f(sluice::detail::simd::level_t<sluice::simd::avx2>{});
#endif
#if SLUICE_HAVE_AVX512_TARGET
  if (sluice::simd_level() >= sluice::simd::avx512) f(sluice::detail::simd::level_t<sluice::simd::avx512>{});
#endif
}

TEST_CASE("the Adam lanes of every level equal the baseline's bit for bit, and the bf16 loop too") {
  using detail::optim::adam_kernel;
  std::size_t const n = 1003;  // not a multiple of 4, 8, 16 or 32: covers the partial tails
  // Edge values among the random ones: zero and huge gradients, zero moments, NaN, infinity.
  auto edge = [](std::vector<float> v) {
    v[0] = 0.0f, v[1] = -0.0f, v[2] = 3e38f, v[3] = std::numeric_limits<float>::infinity();
    v[4] = std::numeric_limits<float>::quiet_NaN(), v[5] = 1e-40f;
    return v;
  };
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    adam_kernel const k(1e-2, 0.9, 0.999, 1e-8, variant == 0 ? 0.0 : 1e-2, variant == 2, 7);
    auto const g = edge(random_floats(n, 40));
    auto const p0 = random_floats(n, 41), m0 = random_floats(n, 42, 1e-2f);
    auto v0 = random_floats(n, 43, 1e-4f);
    for (auto& x : v0) x = std::abs(x);
    v0[6] = 0.0f;
    auto p1 = p0, m1 = m0, v1 = v0;
    k.core_at<sluice::simd::baseline>(p1.data(), g.data(), m1.data(), v1.data(), n);
    // bf16 moments: widen, the baseline's fp32 step, stochastic rounding with byte 0 / byte 1 of rnd.
    std::vector<std::uint16_t> mb(n), vb(n), rnd(n);
    std::mt19937 rng(44);
    for (std::size_t i = 0; i < n; ++i) {
      mb[i] = detail::bf16_nearest(m1[i]);
      vb[i] = detail::bf16_nearest(v1[i]);
      rnd[i] = static_cast<std::uint16_t>(rng());
    }
    mb[7] = 0x7f80, vb[8] = 0xffc1;  // infinity and a negative NaN among the moments
    auto const q0 = random_floats(n, 45);
    auto q1 = q0;
    auto mb1 = mb, vb1 = vb;
    std::vector<float> mf(n), vf(n);
    for (std::size_t i = 0; i < n; ++i) mf[i] = detail::bf16_to_float(mb[i]), vf[i] = detail::bf16_to_float(vb[i]);
    k.core_at<sluice::simd::baseline>(q1.data(), g.data(), mf.data(), vf.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      mb1[i] = detail::bf16_stochastic(mf[i], (std::uint32_t{rnd[i]} << 24) & 0xff000000u);
      vb1[i] = detail::bf16_stochastic(vf[i], (std::uint32_t{rnd[i]} << 16) & 0xff000000u);
    }
    for_each_level([&](auto level) {
      constexpr sluice::simd L = decltype(level)::value;
      CAPTURE(static_cast<int>(L));
      auto p2 = p0, m2 = m0, v2 = v0;
      k.core_at<L>(p2.data(), g.data(), m2.data(), v2.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(std::bit_cast<std::uint32_t>(p1[i]) == std::bit_cast<std::uint32_t>(p2[i]));
        REQUIRE(std::bit_cast<std::uint32_t>(m1[i]) == std::bit_cast<std::uint32_t>(m2[i]));
        REQUIRE(std::bit_cast<std::uint32_t>(v1[i]) == std::bit_cast<std::uint32_t>(v2[i]));
      }
      auto q2 = q0;
      auto mb2 = mb, vb2 = vb;
      k.core_bf16_at<L>(q2.data(), g.data(), mb2.data(), vb2.data(), rnd.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(std::bit_cast<std::uint32_t>(q1[i]) == std::bit_cast<std::uint32_t>(q2[i]));
        REQUIRE(mb1[i] == mb2[i]);
        REQUIRE(vb1[i] == vb2[i]);
      }
    });
  }
}

TEST_CASE("the SGD lanes of every level (per tile and over a range) equal the baseline's bit for bit") {
  using detail::optim::sgd_kernel;
  using sluice::simd;
  std::size_t const n = 1003;  // partial tails of 3 and 11
  auto g = random_floats(n, 60);
  g[0] = 0.0f, g[1] = -0.0f, g[2] = 3e38f, g[3] = std::numeric_limits<float>::infinity();
  g[4] = std::numeric_limits<float>::quiet_NaN(), g[5] = 1e-40f;
  for (double momentum : {0.0, 0.9})
    for (double wd : {0.0, 1e-2})
      for (bool nesterov : {false, true})
        for (std::uint64_t step : {std::uint64_t{1}, std::uint64_t{5}}) {
          if (momentum == 0 && nesterov) continue;
          CAPTURE(momentum);
          CAPTURE(wd);
          CAPTURE(nesterov);
          CAPTURE(step);
          sgd_kernel const k(1e-2, momentum, 0.1, wd, nesterov, step);
          auto p1 = random_floats(n, 61), b1 = random_floats(n, 62, 1e-2f);
          k.run_at<simd::baseline, false>(p1.data(), g.data(), b1.data(), n);
          auto check = [&](auto level, bool range) {
            CAPTURE(static_cast<int>(decltype(level)::value));
            CAPTURE(range);
            auto p2 = random_floats(n, 61), b2 = random_floats(n, 62, 1e-2f);
            range ? k.run_at<decltype(level)::value, true>(p2.data(), g.data(), b2.data(), n)
                  : k.run_at<decltype(level)::value, false>(p2.data(), g.data(), b2.data(), n);
            for (std::size_t i = 0; i < n; ++i) {
              REQUIRE(std::bit_cast<std::uint32_t>(p1[i]) == std::bit_cast<std::uint32_t>(p2[i]));
              REQUIRE(std::bit_cast<std::uint32_t>(b1[i]) == std::bit_cast<std::uint32_t>(b2[i]));
            }
          };
          for (bool range : {false, true}) {
            for_each_level([&](auto level) { check(level, range); });
          }
        }
}

// Every level's fused loop (Philox in registers from aligned starts, the words through memory
// for the rest) against the baseline's loop over the stream's words through memory.
TEST_CASE("the fused bf16 loop draws the same Philox bits as the stream through memory, on every level") {
  using detail::optim::adam_kernel;
  stream_key const key{.seed = 0xfeed'beef'1234'5678ull, .rank = stream_key::shared_rank, .step = 9, .tensor = 3};
  auto const lanes = detail::philox_lanes::from(key);
  std::size_t const total = 2000;
  auto g = random_floats(total, 50);
  g[70] = std::numeric_limits<float>::quiet_NaN();   // NaN moments inside the fused loop
  g[600] = -std::numeric_limits<float>::infinity();  // infinite ones, and a false alarm with m + v
  for (int variant = 0; variant < 3; ++variant) {
    adam_kernel const k(1e-2, 0.9, 0.999, 1e-8, variant == 0 ? 0.0 : 1e-2, variant == 2, 4);
    // Aligned and unaligned first elements, lengths below, at and above one and two groups of
    // every level (32, 64 and 128 elements).
    for (std::uint64_t first : {std::uint64_t{0}, std::uint64_t{8}, std::uint64_t{3}, std::uint64_t{8000}})
      for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{40}, std::size_t{64}, std::size_t{100},
                            std::size_t{127}, std::size_t{128}, std::size_t{200}, std::size_t{256}, std::size_t{511},
                            std::size_t{512}, std::size_t{1500}}) {
        CAPTURE(variant);
        CAPTURE(first);
        CAPTURE(n);
        auto const p0 = random_floats(n, 51);
        std::vector<std::uint16_t> mb0(n), vb0(n);
        auto const m0 = random_floats(n, 52, 1e-2f), v0 = random_floats(n, 53, 1e-4f);
        for (std::size_t i = 0; i < n; ++i) {
          mb0[i] = detail::bf16_nearest(m0[i]);
          vb0[i] = detail::bf16_nearest(std::abs(v0[i]));
        }
        if (n > 10) mb0[9] = 0xff80, vb0[9] = 0x7f80;  // -inf + inf: NaN update
        // Reference: the stream's words through memory, then the baseline's loop.
        auto p1 = p0;
        auto mb1 = mb0, vb1 = vb0;
        std::uint64_t const lo = first >> 3, hi = (first + n - 1) >> 3;
        std::vector<std::uint32_t> words(4 * static_cast<std::size_t>(hi - lo + 1));
        lanes.words(lo, static_cast<std::size_t>(hi - lo + 1), words.data());
        k.core_bf16_at<sluice::simd::baseline>(p1.data(), g.data(), mb1.data(), vb1.data(),
                                               reinterpret_cast<std::uint16_t const*>(words.data()) + (first & 7), n);
        for_each_level([&](auto level) {
          CAPTURE(static_cast<int>(decltype(level)::value));
          auto p2 = p0;
          auto mb2 = mb0, vb2 = vb0;
          k.core_bf16_stream_at<decltype(level)::value>(p2.data(), g.data(), mb2.data(), vb2.data(), lanes, first, n);
          for (std::size_t i = 0; i < n; ++i) {
            REQUIRE(std::bit_cast<std::uint32_t>(p1[i]) == std::bit_cast<std::uint32_t>(p2[i]));
            REQUIRE(mb1[i] == mb2[i]);
            REQUIRE(vb1[i] == vb2[i]);
          }
        });
      }
  }
}

namespace {

/// bf16-moment Adam and L2 Adam through the public steps, hashed (FNV-1a over parameter and
/// moment bits): dense steps (the fused loop from aligned starts, with a NaN and an infinite
/// gradient), sparse blocks of 300 (the fused loop from unaligned starts, partial last block) and
/// of 16 (the tile path). Inputs from splitmix64, so the digest does not depend on <random>.
std::uint64_t bf16_steps_digest() {
  std::uint64_t digest = 0xcbf29ce484222325u, state = 11;
  auto next = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  };
  auto uniform = [&] { return static_cast<float>(next() >> 40) / 16777216.0f - 0.5f; };
  auto mix = [&](float x) {
    auto const b = std::bit_cast<std::uint32_t>(x);
    for (int s = 0; s < 32; s += 8) digest = (digest ^ ((b >> s) & 0xffu)) * 0x100000001b3u;
  };
  std::size_t const n = 5003;
  auto run = [&](auto const& o) {
    using O = std::decay_t<decltype(o)>;
    std::vector<float> p(n), g(n);
    for (auto& x : p) x = uniform();
    optimizer_state<O> s(o, n, 3);
    for (int t = 0; t < 3; ++t) {
      for (auto& x : g) x = uniform();
      if (t == 1) g[70] = std::numeric_limits<float>::quiet_NaN(), g[600] = -std::numeric_limits<float>::infinity();
      sluice::step(o, s, std::span<float>(p), std::span<float const>(g));
    }
    for (std::size_t b : {std::size_t{300}, std::size_t{16}})
      for (int t = 0; t < 2; ++t) {
        std::vector<std::uint32_t> idx;
        for (std::size_t j = 0; j < (n + b - 1) / b; ++j)
          if ((next() & 3) != 0) idx.push_back(static_cast<std::uint32_t>(j));
        std::vector<float> vals(idx.size() * b);
        for (auto& x : vals) x = uniform();
        sluice::step(o, s, std::span<float>(p), sparse_view<float const>{idx, vals, n, b});
      }
    for (std::size_t i = 0; i < n; ++i) mix(p[i]), mix(s.moment(0, i)), mix(s.moment(1, i));
  };
  run(adam{.lr = 1e-2, .state_type = element_type::bf16, .seed = 5});
  run(adam{.lr = 1e-2, .weight_decay = 1e-2, .state_type = element_type::bf16, .seed = 6});
  return digest;
}

}  // namespace

// The digest was taken with SLUICE_SIMD=baseline before the bf16 loops became one body over lanes;
// ctest runs this binary on the baseline, AVX2 and default (AVX-512 where the CPU has it) bodies.
TEST_CASE("bf16-moment adam steps, dense and sparse, are the same bits on every SIMD level") {
  CHECK(bf16_steps_digest() == 0xf94dfdd7bf93a2cdu);
}
