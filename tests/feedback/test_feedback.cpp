// Feedback policies against plain references: mass conservation for every codec with residual,
// fused == unfused bit for bit, DGC masking, EF21, warm-up and the non-finite policies.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include <sluice/feedback/all.hpp>

#include "codecs.hpp"
#include "support/feedback_reference.hpp"

namespace {

using sluice::feedback_state;
using sluice::feedback_workspace;

std::vector<float> random_grad(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

// Runs `f` with codec `c` on one tensor for `steps` steps; returns the sum of decoded messages.
template <class F, class C>
struct run {
  F f;
  C c;
  std::size_t n;
  feedback_state state;
  feedback_workspace<C, float> ws{};
  std::vector<std::byte> out;
  std::vector<float> decoded;
  std::vector<std::vector<std::byte>> messages;

  run(F f_, C c_, std::size_t n_, sluice::warmup w = {})
      : f(f_), c(c_), n(n_), state(f_, std::vector<std::size_t>{n_}), out(), decoded(n_) {
    state.set_warmup(w);
    out.resize(w.peak(c).max_encoded_bytes(n));
  }

  std::size_t step(std::span<float const> g, std::uint64_t t, std::vector<float>* sum = nullptr) {
    // Matrix-shaped when it factors (PowerSGD compresses matrices; 1-D falls back to identity).
    std::array<std::size_t, 2> const shape{n / 100, 100};
    sluice::encode_context ctx{.seed = 7, .rank = 1, .step = t, .tensor = 0};
    if (n % 100 == 0) ctx.shape = shape;
    std::size_t const bytes = f.encode(c, state.slice(0), g, ctx, ws, std::span<std::byte>(out));
    messages.emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(bytes));
    if (sum != nullptr && bytes > 0) {
      C cc = c;  // the codec of step t: ramped when it declares a strength
      if constexpr (sluice::WarmableCodec<C>) cc = state.warmup().apply(c, t);
      sluice::decode(cc, std::span<std::byte const>(out.data(), bytes), ctx, ws.codec, std::span<float>(decoded));
      for (std::size_t i = 0; i < n; ++i) (*sum)[i] += decoded[i];
    }
    return bytes;
  }
};

// A strength declared by a type that is not otherwise a codec: warm-up needs nothing else.
struct bits_codec {
  int bits = 4;
  static constexpr sluice::codec_strength<bits_codec, int> strength{&bits_codec::bits, "bits", 8};
};

// The fused residual paths are the codecs' own encode_compensated members, found by detection.
template <class C, class T, class S>
constexpr bool offers_fused = requires(C const& c, std::span<T const> g, sluice::feedback_slice const& s,
                                       sluice::encode_context const& ctx, sluice::codec_workspace<C, T>& ws,
                                       std::span<std::byte> out) {
  c.template encode_compensated<S>(g, s, ctx, ws, out);
};
static_assert(offers_fused<sluice::block_top_k, float, float> && offers_fused<sluice::maxmin_quantize, float, float> &&
              offers_fused<sluice::maxmin_quantize, sluice::half, sluice::bfloat16>);
static_assert(!offers_fused<sluice::block_top_k, float, sluice::bfloat16> &&
              !offers_fused<sluice::top_k, float, float>);

}  // namespace

static_assert(sluice::Feedback<sluice::no_feedback> && sluice::Feedback<sluice::residual> &&
              sluice::Feedback<sluice::momentum_correction> && sluice::Feedback<sluice::ef21>);
static_assert(sluice::FeedbackFor<sluice::residual, sluice::top_k> &&
              sluice::FeedbackFor<sluice::residual, sluice::top_k, sluice::bfloat16> &&
              sluice::FeedbackFor<sluice::momentum_correction, sluice::top_k> &&
              sluice::FeedbackFor<sluice::ef21, sluice::test::grid_codec> &&
              sluice::FeedbackFor<sluice::no_feedback, sluice::top_k, sluice::half>);

TEST_CASE("residual conserves mass for every codec (fp32 and bf16 state, fused and unfused)") {
  constexpr std::size_t n = 3000, steps = 60;
  sluice::test::for_each_codec([&](auto codec) {
    for (auto precision : {sluice::element_type::f32, sluice::element_type::bf16})
      for (bool fuse : {true, false}) {
        CAPTURE(fmt::format("{}", codec));
        CAPTURE(sluice::to_string(precision));
        CAPTURE(fuse);
        run r(sluice::residual{.precision = precision, .fuse = fuse}, codec, n);
        std::vector<float> sent(n, 0.0f);
        std::vector<double> total(n, 0.0);
        for (std::size_t t = 0; t < steps; ++t) {
          auto const g = random_grad(n, static_cast<std::uint32_t>(t + 1));
          for (std::size_t i = 0; i < n; ++i) total[i] += g[i];
          r.step(g, t, &sent);
        }
        double worst = 0, scale = 0;
        for (std::size_t i = 0; i < n; ++i) {
          double const e = r.state.value(0, 0, i);
          worst = std::max(worst, std::abs(static_cast<double>(sent[i]) + e - total[i]));
          scale = std::max({scale, std::abs(e), std::abs(static_cast<double>(sent[i]))});
        }
        // fp32: rounding of ~steps additions. bf16: stochastic rounding of the residual every
        // step, unbiased, relative 2^-8 of |e| each time, so it grows like sqrt(steps) * |e|.
        // Relative to the largest magnitude: codecs that are not contractions (random_k with
        // rescaling, QSGD at few levels) make the residual grow without bound under EF-SGD, and
        // mass is still conserved (docs/feedback.md).
        double const tol = precision == sluice::element_type::f32 ? 1e-3 + 1e-6 * scale
                                                                  : 0.5 + 0x1p-8 * std::sqrt(double{steps}) * scale;
        CHECK(worst < tol);
      }
  });
}

TEST_CASE("fused residual is bit-identical to the unfused composition") {
  constexpr std::size_t n = 4099, steps = 12;
  sluice::test::for_each_codec([&](auto codec) {
    for (auto precision : {sluice::element_type::f32, sluice::element_type::bf16})
      for (auto policy : {sluice::non_finite_policy::throw_error, sluice::non_finite_policy::propagate}) {
        CAPTURE(fmt::format("{}", codec));
        CAPTURE(sluice::to_string(precision));
        run a(sluice::residual{.precision = precision, .non_finite = policy, .fuse = true}, codec, n);
        run b(sluice::residual{.precision = precision, .non_finite = policy, .fuse = false}, codec, n);
        for (std::size_t t = 0; t < steps; ++t) {
          auto g = random_grad(n, static_cast<std::uint32_t>(100 + t), t % 3 == 0 ? 1e-3f : 2.0f);
          if (policy == sluice::non_finite_policy::propagate && t == 5) g[17] = NAN, g[4000] = INFINITY;
          a.step(g, t);
          b.step(g, t);
          REQUIRE(a.messages.back() == b.messages.back());
          REQUIRE(a.state.save() == b.state.save());
        }
      }
  });
  // bf16 gradients take the scratch path of the fused sparse kernel.
  constexpr std::size_t m = 1000;
  sluice::residual const fa{.precision = sluice::element_type::bf16},
      fb{.precision = sluice::element_type::bf16, .fuse = false};
  feedback_state sa(fa, std::vector<std::size_t>{m}), sb(fb, std::vector<std::size_t>{m});
  feedback_workspace<sluice::top_k, sluice::bfloat16> wa, wb;
  sluice::top_k const c{.ratio = 0.1};
  std::vector<std::byte> oa(c.max_encoded_bytes(m)), ob(oa.size());
  for (std::uint64_t t = 0; t < 5; ++t) {
    auto const gf = random_grad(m, static_cast<std::uint32_t>(t));
    std::vector<sluice::bfloat16> g(m);
    for (std::size_t i = 0; i < m; ++i) g[i] = sluice::bfloat16(gf[i]);
    sluice::encode_context const ctx{.step = t};
    auto const na = fa.encode(c, sa.slice(0), std::span<sluice::bfloat16 const>(g), ctx, wa, std::span(oa));
    auto const nb = fb.encode(c, sb.slice(0), std::span<sluice::bfloat16 const>(g), ctx, wb, std::span(ob));
    REQUIRE(na == nb);
    REQUIRE(std::equal(oa.begin(), oa.begin() + static_cast<std::ptrdiff_t>(na), ob.begin()));
    REQUIRE(sa == sb);
  }
}

TEST_CASE("residual matches the EF-SGD reference exactly (fp32)") {
  constexpr std::size_t n = 2000;
  sluice::top_k const c{.ratio = 0.01};
  run r(sluice::residual{}, c, n);
  std::vector<float> e(n, 0.0f);
  for (std::uint64_t t = 0; t < 20; ++t) {
    auto const g = random_grad(n, static_cast<std::uint32_t>(t + 50));
    std::vector<float> sent(n, 0.0f);
    r.step(g, t, &sent);
    auto const ref = sluice::test::reference_residual_step(
        e, g, [&](std::vector<float> const& x) { return sluice::test::reference_top_k(x, c.keep(n)); });
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(sent[i] == ref[i]);
      REQUIRE(r.state.value(0, 0, i) == e[i]);
    }
  }
}

TEST_CASE("momentum_correction: DGC masking zeroes exactly the sent positions") {
  constexpr std::size_t n = 1500;
  sluice::top_k const c{.ratio = 0.02};
  float const m = 0.9f;
  run r(sluice::momentum_correction{.momentum = 0.9}, c, n);
  std::vector<float> u(n, 0.0f), v(n, 0.0f);
  for (std::uint64_t t = 0; t < 15; ++t) {
    auto const g = random_grad(n, static_cast<std::uint32_t>(t + 7));
    std::vector<float> sent(n, 0.0f);
    r.step(g, t, &sent);
    auto const ref = sluice::test::reference_momentum_step(
        u, v, g, m, [&](std::vector<float> const& x) { return sluice::test::reference_top_k(x, c.keep(n)); });
    std::size_t sent_count = 0;
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(sent[i] == ref[i]);
      if (sent[i] != 0.0f) {
        ++sent_count;
        REQUIRE(r.state.value(0, 0, i) == 0.0f);  // momentum
        REQUIRE(r.state.value(0, 1, i) == 0.0f);  // accumulator
      } else {
        REQUIRE(r.state.value(0, 0, i) == u[i]);
        REQUIRE(r.state.value(0, 1, i) == v[i]);
        REQUIRE(u[i] != 0.0f);
      }
    }
    CHECK(sent_count == c.keep(n));
  }
}

TEST_CASE("ef21 tracks the gradient estimate as the reference does") {
  constexpr std::size_t n = 800;
  sluice::top_k const c{.ratio = 0.05};
  run r(sluice::ef21{}, c, n);
  std::vector<float> h(n, 0.0f);
  auto const g = random_grad(n, 3);  // a fixed gradient: h converges to it
  for (std::uint64_t t = 0; t < 60; ++t) {
    std::vector<float> sent(n, 0.0f);
    r.step(g, t, &sent);
    auto const ref = sluice::test::reference_ef21_step(
        h, g, [&](std::vector<float> const& x) { return sluice::test::reference_top_k(x, c.keep(n)); });
    for (std::size_t i = 0; i < n; ++i) REQUIRE(r.state.value(0, 0, i) == h[i]);
  }
  double err = 0;
  for (std::size_t i = 0; i < n; ++i) err = std::max(err, static_cast<double>(std::abs(h[i] - g[i])));
  CHECK(err < 1e-6);
}

TEST_CASE("no_feedback sends the codec's message of the gradient") {
  constexpr std::size_t n = 500;
  sluice::top_k const c{.ratio = 0.1};
  run r(sluice::no_feedback{}, c, n);
  auto const g = random_grad(n, 9);
  std::vector<float> sent(n, 0.0f);
  r.step(g, 0, &sent);
  CHECK(sent == sluice::test::reference_top_k(g, c.keep(n)));
  CHECK(r.state.buffers() == 0);
}

TEST_CASE("warm-up: DGC's exponential ramp, a bits ramp, one mechanism for every codec") {
  sluice::warmup const dgc{.steps = 400, .start = 0.25, .stages = 4};
  CHECK(dgc.strength(0, 0.001, 0.25) == doctest::Approx(0.25));
  CHECK(dgc.strength(99, 0.001, 0.25) == doctest::Approx(0.25));
  CHECK(dgc.strength(100, 0.001, 0.25) == doctest::Approx(0.25 * std::pow(0.004, 0.25)));
  CHECK(dgc.strength(300, 0.001, 0.25) == doctest::Approx(0.25 * std::pow(0.004, 0.75)));
  CHECK(dgc.strength(400, 0.001, 0.25) == 0.001);
  sluice::top_k const c{.ratio = 0.001};
  CHECK(dgc.apply(c, 0).ratio == doctest::Approx(0.25));
  CHECK(dgc.apply(c, 10000) == c);
  CHECK(dgc.peak(c).ratio == doctest::Approx(0.25));
  CHECK(sluice::warmup{}.apply(c, 0) == c);

  sluice::warmup const bits{.steps = 4, .start = 8, .shape = sluice::ramp_shape::linear};
  CHECK(bits.apply(bits_codec{}, 0).bits == 8);
  CHECK(bits.apply(bits_codec{}, 1).bits == 7);
  CHECK(bits.apply(bits_codec{}, 2).bits == 6);
  CHECK(bits.apply(bits_codec{}, 4).bits == 4);
  CHECK(sluice::warmup{.steps = 4}.apply(bits_codec{}, 0).bits == 8);  // start 0: 8 bits
  CHECK(sluice::warmup{.steps = 4}.apply(sluice::qsgd{.levels = 7}, 0).levels == 127);
  CHECK(sluice::warmup{.steps = 4}.apply(sluice::power_sgd{.rank = 2}, 0).rank == 8);
  static_assert(!sluice::WarmableCodec<sluice::sign>);  // no strength: apply does not compile
  CHECK(sluice::warmup{.steps = 4}.peak(sluice::sign{}) == sluice::sign{});
  CHECK_THROWS_AS(feedback_state().set_warmup({.start = -1}), sluice::error);

  // The schedule reaches the encode: early messages carry more values.
  constexpr std::size_t n = 4000;
  run r(sluice::residual{}, c, n, dgc);
  auto const g = random_grad(n, 1);
  auto const early = r.step(g, 0);
  auto const late = r.step(g, 500);
  CHECK(early > 10 * late);
  CHECK(fmt::format("{}", dgc).find("stages = 4") != std::string::npos);
}

TEST_CASE("residual with encode_context::fail_stop finds a NaN in its own pass, and sends the same bits") {
  // A caller that stops on the error (a pipeline) lets throw_error skip the scan before the
  // encode: every path (fused block, fused quantizer, fused sparse, unfused) finds the value in
  // its compensation pass and throws the same error; without a NaN the frame and state are those
  // of the scanned call.
  constexpr std::size_t n = 4096;
  auto check = [&](auto const& c, bool fuse) {
    using C = std::remove_cvref_t<decltype(c)>;
    CAPTURE(fmt::format("{}, fuse {}", c, fuse));
    sluice::residual const f{.fuse = fuse};
    std::vector<std::string> names{"layer1.weight"};
    auto const g = random_grad(n, 3);
    std::vector<std::vector<std::byte>> frames;
    std::vector<std::vector<std::byte>> states;
    for (bool stop : {false, true}) {
      feedback_state s(f, std::vector<std::size_t>{n}, names);
      feedback_workspace<C, float> ws;
      std::vector<std::byte> out(c.max_encoded_bytes(n) * 2);
      sluice::encode_context ctx{.seed = 1, .step = 3};
      ctx.fail_stop = stop;
      auto const bytes = f.encode(c, s.slice(0), std::span<float const>(g), ctx, ws, std::span(out));
      frames.emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(bytes));
      states.push_back(s.save());
      auto bad = g;
      bad[2049] = NAN;
      bad[3000] = INFINITY;
      try {
        (void)f.encode(c, s.slice(0), std::span<float const>(bad), ctx, ws, std::span(out));
        FAIL("no throw");
      } catch (sluice::error const& e) {
        CHECK(e.kind() == sluice::errc::non_finite);
        std::string const what = e.what();
        CHECK(what.find("layer1.weight") != std::string::npos);
        CHECK(what.find("element 2049") != std::string::npos);
      }
      if (!stop) CHECK(s.save() == states.back());  // the scan: nothing changed
    }
    CHECK(frames[0] == frames[1]);
    CHECK(states[0] == states[1]);
  };
  for (bool fuse : {true, false}) {
    check(sluice::block_top_k{.ratio = 0.05}, fuse);
    check(sluice::maxmin_quantize{.bits = 4}, fuse);
    check(sluice::top_k{.ratio = 0.05}, fuse);
  }
}

TEST_CASE("non-finite gradients: throw, skip_step and propagate never poison the state") {
  constexpr std::size_t n = 300;
  sluice::top_k const c{.ratio = 0.1};
  auto g = random_grad(n, 11);
  std::vector<std::string> names{"layer3.weight"};
  for (auto precision : {sluice::element_type::f32, sluice::element_type::bf16}) {
    sluice::residual const thrower{.precision = precision};
    feedback_state s(thrower, std::vector<std::size_t>{n}, names);
    feedback_workspace<sluice::top_k, float> ws;
    std::vector<std::byte> out(c.max_encoded_bytes(n));
    sluice::encode_context ctx{.step = 0};
    thrower.encode(c, s.slice(0), std::span<float const>(g), ctx, ws, std::span(out));
    auto const before = s.save();
    auto bad = g;
    bad[123] = NAN;
    ctx.step = 42;
    try {
      thrower.encode(c, s.slice(0), std::span<float const>(bad), ctx, ws, std::span(out));
      FAIL("no throw");
    } catch (sluice::error const& e) {
      CHECK(e.kind() == sluice::errc::non_finite);
      std::string const what = e.what();
      CHECK(what.find("layer3.weight") != std::string::npos);
      CHECK(what.find("step 42") != std::string::npos);
      CHECK(what.find("element 123") != std::string::npos);
    }
    CHECK(s.save() == before);

    sluice::residual const skipper{.precision = precision, .non_finite = sluice::non_finite_policy::skip_step};
    CHECK(skipper.encode(c, s.slice(0), std::span<float const>(bad), ctx, ws, std::span(out)) == 0);
    auto const rep = s.report();
    CHECK(rep.skipped_calls == 1);
    CHECK(rep.last_skipped_step == 42);
    s.restore(before);  // the counter is the only change
    CHECK(s.save() == before);

    sluice::residual const passer{.precision = precision, .non_finite = sluice::non_finite_policy::propagate};
    bad[7] = -INFINITY;
    auto const bytes = passer.encode(c, s.slice(0), std::span<float const>(bad), ctx, ws, std::span(out));
    CHECK(bytes > 0);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(std::isfinite(s.value(0, 0, i)));
    CHECK(s.value(0, 0, 123) == 0.0f);
    CHECK(s.report().non_finite_values == 2);
  }
  // The public scan a pipeline runs over a whole step first.
  CHECK(sluice::first_non_finite(std::span<float const>(g)) == static_cast<std::size_t>(-1));
  auto late = g;
  late[250] = INFINITY;
  late[260] = NAN;
  CHECK(sluice::first_non_finite(std::span<float const>(late)) == 250);
  // Other policies throw the same way.
  sluice::momentum_correction const mc;
  feedback_state sm(mc, std::vector<std::size_t>{n});
  feedback_workspace<sluice::top_k, float> ws;
  std::vector<std::byte> out(c.max_encoded_bytes(n));
  auto bad = g;
  bad[0] = INFINITY;
  CHECK_THROWS_AS(mc.encode(c, sm.slice(0), std::span<float const>(bad), {}, ws, std::span(out)), sluice::error);
  CHECK_THROWS_AS(sluice::no_feedback{}.encode(c, sm.slice(0), std::span<float const>(bad), {}, ws, std::span(out)),
                  sluice::error);
}

TEST_CASE("bad calls are errors before anything changes") {
  constexpr std::size_t n = 100;
  sluice::residual const f;
  feedback_state s(f, std::vector<std::size_t>{n});
  feedback_workspace<sluice::top_k, float> ws;
  std::vector<std::byte> out(sluice::top_k{}.max_encoded_bytes(n));
  auto const g = random_grad(n, 1);
  auto const before = s.save();
  auto kind_of = [](auto&& fn) {
    try {
      fn();
    } catch (sluice::error const& e) {
      return e.kind();
    }
    return sluice::errc{};
  };
  CHECK(kind_of([&] {
          f.encode(sluice::top_k{.ratio = 2}, s.slice(0), std::span<float const>(g), {}, ws, std::span(out));
        }) == sluice::errc::invalid_argument);
  CHECK(kind_of([&] {
          f.encode(sluice::top_k{}, s.slice(0), std::span<float const>(g), {}, ws, std::span(out).first(10));
        }) == sluice::errc::size_mismatch);
  CHECK(kind_of([&] {
          f.encode(sluice::top_k{}, s.slice(0, 0, 50), std::span<float const>(g), {}, ws, std::span(out));
        }) == sluice::errc::size_mismatch);
  feedback_state none(sluice::no_feedback{}, std::vector<std::size_t>{n});
  CHECK(kind_of([&] { f.encode(sluice::top_k{}, none.slice(0), std::span<float const>(g), {}, ws, std::span(out)); }) ==
        sluice::errc::invalid_argument);
  CHECK(kind_of([&] { (void)s.slice(0, 90, 20); }) == sluice::errc::size_mismatch);
  CHECK(kind_of([&] { (void)s.slice(1); }) == sluice::errc::invalid_argument);
  CHECK(s.save() == before);
  CHECK(fmt::format("{}", sluice::residual{}) == "residual{.precision = f32, .non_finite = throw_error, .fuse = true}");
  CHECK(fmt::format("{}", sluice::momentum_correction{}).find("momentum = 0.9") != std::string::npos);
  CHECK(fmt::format("{}", sluice::ef21{}) == "ef21{.precision = f32, .non_finite = throw_error}");
  CHECK(fmt::format("{}", sluice::no_feedback{}) == "no_feedback{.non_finite = throw_error}");
}

#ifdef SLUICE_TEST_HAVE_MAXMIN
TEST_CASE_TEMPLATE("fused residual + maxmin_quantize is bit-identical for every grid and rounding", T, float,
                   sluice::bfloat16, sluice::half) {
  constexpr std::size_t n = 5000;  // not a multiple of any bucket
  for (auto const& c : {sluice::maxmin_quantize{.bits = 4}, sluice::maxmin_quantize{.bits = 3, .bucket = 100},
                        sluice::maxmin_quantize{.bits = 8, .bucket = 64, .round = sluice::rounding::stochastic},
                        sluice::maxmin_quantize{.bits = 1, .bucket = 4096}})
    for (auto precision : {sluice::element_type::f32, sluice::element_type::bf16}) {
      CAPTURE(fmt::format("{}", c));
      sluice::residual const fa{.precision = precision, .non_finite = sluice::non_finite_policy::propagate};
      auto fb = fa;
      fb.fuse = false;
      feedback_state sa(fa, std::vector<std::size_t>{n}), sb(fb, std::vector<std::size_t>{n});
      feedback_workspace<sluice::maxmin_quantize, T> wa, wb;
      std::vector<std::byte> oa(c.max_encoded_bytes(n)), ob(oa.size());
      for (std::uint64_t t = 0; t < 6; ++t) {
        auto const gf = random_grad(n, static_cast<std::uint32_t>(t + 31));
        std::vector<T> g(n);
        for (std::size_t i = 0; i < n; ++i) g[i] = T(gf[i]);
        if (t == 3) g[777] = T(NAN);
        sluice::encode_context const ctx{.seed = 5, .rank = 2, .step = t, .tensor = 9};
        auto const na = fa.encode(c, sa.slice(0), std::span<T const>(g), ctx, wa, std::span(oa));
        auto const nb = fb.encode(c, sb.slice(0), std::span<T const>(g), ctx, wb, std::span(ob));
        REQUIRE(na == nb);
        REQUIRE(std::equal(oa.begin(), oa.begin() + static_cast<std::ptrdiff_t>(na), ob.begin()));
        REQUIRE(sa == sb);
      }
    }
}

TEST_CASE("fused residual + maxmin_quantize is bit-identical past the single-pass checksum limit") {
  // Large enough that both paths hash checksum blocks while writing (per thread, in the fused one).
  constexpr std::size_t n = (std::size_t{3} << 20) + 4133;
  for (auto const& c : {sluice::maxmin_quantize{.bits = 4}, sluice::maxmin_quantize{.bits = 3, .bucket = 100}}) {
    CAPTURE(fmt::format("{}", c));
    sluice::residual const fa{.non_finite = sluice::non_finite_policy::propagate};
    auto fb = fa;
    fb.fuse = false;
    feedback_state sa(fa, std::vector<std::size_t>{n}), sb(fb, std::vector<std::size_t>{n});
    feedback_workspace<sluice::maxmin_quantize, float> wa, wb;
    std::vector<std::byte> oa(c.max_encoded_bytes(n)), ob(oa.size());
    for (std::uint64_t t = 0; t < 2; ++t) {
      auto const g = random_grad(n, static_cast<std::uint32_t>(t + 77));
      sluice::encode_context const ctx{.seed = 5, .rank = 1, .step = t, .tensor = 3};
      auto const na = fa.encode(c, sa.slice(0), std::span<float const>(g), ctx, wa, std::span(oa));
      auto const nb = fb.encode(c, sb.slice(0), std::span<float const>(g), ctx, wb, std::span(ob));
      REQUIRE(na == nb);
      REQUIRE(std::equal(oa.begin(), oa.begin() + static_cast<std::ptrdiff_t>(na), ob.begin()));
      std::uint64_t stored = 0;
      std::memcpy(&stored, oa.data() + 72, 8);
      CHECK(stored == sluice::detail::wire::frame_checksum(std::span<std::byte const>(oa.data(), na)));
      REQUIRE(sa == sb);
    }
  }
}
#endif

#ifdef SLUICE_TEST_HAVE_BLOCK_TOP_K
TEST_CASE("fused residual + block_top_k is bit-identical for every block size and score") {
  constexpr std::size_t n = 5003;  // a partial last block for every block size below
  for (auto const& c : {sluice::block_top_k{.ratio = 0.02}, sluice::block_top_k{.ratio = 0.1, .block = 5},
                        sluice::block_top_k{.ratio = 0.03, .score = sluice::block_score::l2},
                        sluice::block_top_k{.ratio = 0.5, .block = 64, .score = sluice::block_score::l2}})
    for (auto policy : {sluice::non_finite_policy::throw_error, sluice::non_finite_policy::propagate}) {
      CAPTURE(fmt::format("{}", c));
      run a(sluice::residual{.non_finite = policy}, c, n);
      run b(sluice::residual{.non_finite = policy, .fuse = false}, c, n);
      for (std::size_t t = 0; t < 8; ++t) {
        auto g = random_grad(n, static_cast<std::uint32_t>(300 + t), t % 2 ? 1.0f : 1e-4f);
        if (policy == sluice::non_finite_policy::propagate && t == 4) g[10] = NAN, g[5002] = -INFINITY;
        a.step(g, t);
        b.step(g, t);
        REQUIRE(a.messages.back() == b.messages.back());
        REQUIRE(a.state.save() == b.state.save());
      }
    }
}
#endif

TEST_CASE("public entries take what converts to a span: std::vector for gradients, inputs and outputs") {
  // T is deduced from the workspace, so a std::vector<float> converts at the call, as it does for
  // sluice::step. The result is the same as through explicit spans.
  std::size_t const n = 4096;
  std::vector<float> const g = random_grad(n, 11);
  sluice::top_k const c{.ratio = 0.01};
  sluice::encode_context const ctx{.seed = 3, .rank = 0, .step = 0, .tensor = 0};
  sluice::residual const f{};
  feedback_state sa(f, std::vector<std::size_t>{n}), sb(f, std::vector<std::size_t>{n});
  feedback_workspace<sluice::top_k, float> wa, wb;
  std::vector<std::byte> oa(c.max_encoded_bytes(n)), ob(oa.size());
  std::size_t const na = f.encode(c, sa.slice(0), g, ctx, wa, oa);
  std::size_t const nb = f.encode(c, sb.slice(0), std::span<float const>(g), ctx, wb, std::span<std::byte>(ob));
  REQUIRE(na == nb);
  CHECK(std::equal(oa.begin(), oa.begin() + static_cast<std::ptrdiff_t>(na), ob.begin()));

  sluice::top_k::workspace<float> cw;
  std::vector<std::byte> raw(c.max_encoded_bytes(n));
  std::size_t const bytes = c.encode(g, ctx, cw, raw);
  std::vector<float> dense(n, 0.0f);
  sluice::decode(c, std::span<std::byte const>(raw.data(), bytes), ctx, cw, dense);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (dense[i] != 0.0f) {
      CHECK(dense[i] == g[i]);
      ++kept;
    }
  CHECK(kept == c.keep(n));
}
