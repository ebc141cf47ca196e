// optimizer_state: bit-exact save/restore, validation errors thrown before any change, policies as
// regular printable values.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <sluice/optim/all.hpp>

#include "common.hpp"

using namespace sluice;
using namespace sluice::test;

static_assert(Optimizer<sgd> && Optimizer<adam> && Optimizer<adamw>);
static_assert(!Optimizer<int>);
// Moment arrays of large states are not a multiple of 4 KiB apart (L1 sets) nor of 2^28 bytes
// (Zen's way-predictor hash); small ones are packed.
static_assert(detail::optim::moment_stride(std::size_t{1} << 26, 4) * 4 % 4096 != 0);
static_assert(detail::optim::moment_stride(std::size_t{1} << 26, 2) * 2 % 4096 != 0);
static_assert(detail::optim::moment_stride(1000, 4) == 1000);

TEST_CASE_TEMPLATE("save/restore is bit-exact and training continues identically", O, sgd, adam, adamw) {
  // 513 elements: packed moment arrays; 40000: padded apart (detail::optim::moment_stride), which
  // the saved image leaves out.
  for (std::size_t const n : {std::size_t{513}, std::size_t{40000}})
    for (auto states : {element_type::f32, element_type::bf16})
      for (auto mode : {sparse_mode::lazy, sparse_mode::catch_up}) {
        CAPTURE(n);
        O o{};
        o.lr = 1e-2;
        if constexpr (std::is_same_v<O, sgd>) o.momentum = 0.9;
        o.state_type = states;
        o.sparse = mode;
        o.seed = 77;
        auto p = random_floats(n, 1);
        optimizer_state<O> s(o, n, 6);
        for (int t = 0; t < 5; ++t) {
          auto const g = make_sparse(n, 0.3, 100 + static_cast<std::uint32_t>(t));
          sluice::step(o, s, p, sparse_view<float const>{g.indices, g.values, n, 1});
        }
        auto const bytes = s.save();
        CHECK(bytes.size() == s.saved_bytes());
        // Image: 30-byte header, then moment 0's n values, moment 1's n values, then the counters.
        std::size_t const elem = states == element_type::f32 ? 4 : 2, nm = o.layout().moments;
        CHECK(bytes.size() == 30 + nm * n * elem + (mode == sparse_mode::catch_up ? 4 * n : 0) + 8);  // + checksum
        for (std::size_t k = 0; k < nm; ++k)
          for (std::size_t i : {std::size_t{0}, n / 2, n - 1}) {
            std::uint32_t bits = 0;
            std::memcpy(&bits, bytes.data() + 30 + (k * n + i) * elem, elem);
            float const saved = elem == 4 ? std::bit_cast<float>(bits) : std::bit_cast<float>(bits << 16);
            CHECK(std::bit_cast<std::uint32_t>(saved) == std::bit_cast<std::uint32_t>(s.moment(k, i)));
          }
        optimizer_state<O> r;
        r.restore(bytes);
        CHECK(r == s);
        CHECK(r.save() == bytes);
        CHECK(r.step() == 5);
        CHECK(r.tensor() == 6);
        auto q = p;
        for (int t = 0; t < 5; ++t) {
          auto const g = random_floats(n, 200 + static_cast<std::uint32_t>(t));
          sluice::step(o, s, p, g);
          sluice::step(o, r, q, g);
        }
        CHECK(p == q);
        CHECK(r == s);
      }
}

TEST_CASE("restore rejects malformed bytes and leaves the state unchanged") {
  adam const o{};
  optimizer_state<adam> s(o, 100, 1);
  auto p = random_floats(100, 2);
  sluice::step(o, s, p, random_floats(100, 3));
  auto const good = s.save();
  optimizer_state<adam> r(o, 10, 9);
  auto const before = r;
  auto bad = good;
  bad[0] = std::byte{0};
  CHECK_THROWS_AS(r.restore(bad), sluice::error);
  CHECK_THROWS_AS(r.restore(std::span<std::byte const>(good.data(), good.size() - 1)), sluice::error);
  CHECK_THROWS_AS(r.restore(std::span<std::byte const>(good.data(), 10)), sluice::error);
  bad = good;
  bad[6] = std::byte{3};  // three moments
  CHECK_THROWS_AS(r.restore(bad), sluice::error);
  CHECK(r == before);
  try {
    r.restore(std::span<std::byte const>(good.data(), 4));
  } catch (sluice::error const& e) {
    CHECK(e.kind() == errc::malformed_message);
  }
}

TEST_CASE("invalid policies and mismatched sizes throw before any state changes") {
  auto p = random_floats(64, 1);
  auto const p0 = p;
  auto const g = random_floats(64, 2);
  auto expect = [&](auto const& o, auto& s, errc code) {
    try {
      sluice::step(o, s, p, g);
      FAIL("no exception");
    } catch (sluice::error const& e) {
      CHECK(e.kind() == code);
      CHECK(std::string(e.what()).find("tensor 5") != std::string::npos);
    }
    CHECK(s.step() == 0);
    CHECK(p == p0);
  };
  adam const good{};
  optimizer_state<adam> s(good, 64, 5);
  expect(adam{.lr = std::numeric_limits<double>::quiet_NaN()}, s, errc::invalid_argument);
  expect(adam{.lr = std::numeric_limits<double>::infinity()}, s, errc::invalid_argument);
  expect(adam{.beta1 = 1.0}, s, errc::invalid_argument);
  expect(adam{.beta2 = -0.1}, s, errc::invalid_argument);
  expect(adam{.eps = -1}, s, errc::invalid_argument);
  expect(adam{.sparse = sparse_mode::catch_up}, s, errc::invalid_argument);  // state made for lazy
  expect(adam{.state_type = element_type::bf16}, s, errc::invalid_argument);
  adamw const gw{};
  optimizer_state<adamw> sw(gw, 64, 5);
  expect(adamw{.beta2 = 1.5}, sw, errc::invalid_argument);
  sgd const gs{.momentum = 0.9};
  optimizer_state<sgd> ss(gs, 64, 5);
  expect(sgd{.momentum = 0.9, .dampening = 0.1, .nesterov = true}, ss, errc::invalid_argument);
  expect(sgd{.lr = -1, .momentum = 0.9}, ss, errc::invalid_argument);
  expect(sgd{}, ss, errc::invalid_argument);  // no momentum: layout differs
  // Size mismatches.
  optimizer_state<adam> small(good, 63, 5);
  expect(good, small, errc::size_mismatch);
  std::vector<float> short_grad(10);
  CHECK_THROWS_AS(sluice::step(good, s, p, short_grad), sluice::error);
  std::vector<sluice::bfloat16> short_shadow(10);
  CHECK_THROWS_AS(sluice::step(good, s, p, g, std::span<sluice::bfloat16>(short_shadow)), sluice::error);
  CHECK(s.step() == 0);
  CHECK_THROWS_AS((optimizer_state<adam>(state_layout{3, element_type::f32, false}, 4)), sluice::error);
  CHECK_THROWS_AS((optimizer_state<adam>(state_layout{2, element_type::f16, false}, 4)), sluice::error);
}

TEST_CASE("policies are regular, printable values") {
  adam a{.lr = 3e-4};
  adam b = a;
  CHECK(a == b);
  b.beta2 = 0.95;
  CHECK_FALSE(a == b);
  CHECK(fmt::format("{}", a).find("adam{.lr = 0.0003") == 0);
  CHECK(fmt::format("{}", adamw{}).find(".weight_decay = 0.01") != std::string::npos);
  CHECK(fmt::format("{}", sgd{.momentum = 0.9, .nesterov = true}).find(".nesterov = true") != std::string::npos);
  CHECK(fmt::format("{}", sparse_mode::catch_up) == "catch_up");
  CHECK(fmt::format("{}", adam{}.layout()) ==
        "state_layout{.moments = 2, .moment_type = f32, .per_entry_steps = false}");
  CHECK(sgd{}.layout().moments == 0);
  CHECK(sgd{.momentum = 0.5}.layout().moments == 1);
  CHECK(adam{.sparse = sparse_mode::catch_up}.layout().per_entry_steps);
}

TEST_CASE("an empty tensor steps without touching anything") {
  adam const o{};
  optimizer_state<adam> s(o, 0);
  std::vector<float> p, g;
  sluice::step(o, s, p, g);
  sluice::flush(o, s, p);
  CHECK(s.step() == 1);
}

namespace {
// Recomputes the checksum of a saved state after a deliberate edit (core/serial.hpp's format).
void reseal(std::vector<std::byte>& b) {
  std::uint64_t const h = serial::stable_hash(std::span<std::byte const>(b.data(), b.size() - 8));
  std::memcpy(b.data() + b.size() - 8, &h, 8);
}
template <class V>
void poke(std::vector<std::byte>& b, std::size_t at, V v) {
  std::memcpy(b.data() + at, &v, sizeof v);
  reseal(b);
}
void expect_malformed(auto&& f) {
  try {
    f();
    FAIL("expected sluice::error");
  } catch (sluice::error const& e) {
    CHECK_MESSAGE(e.kind() == errc::malformed_message, e.what());
  }
}
}  // namespace

TEST_CASE("every single-byte flip of a saved optimizer state is refused (checksum)") {
  adam const o{};
  optimizer_state<adam> s(o, 37, 4);
  auto p = random_floats(37, 2);
  sluice::step(o, s, p, random_floats(37, 3));
  auto const good = s.save();
  CHECK(good.size() == s.saved_bytes());
  optimizer_state<adam> r(o, 37, 4);
  auto const before = r;
  for (std::size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= std::byte{0x10};  // moments, step, tensor id, header or checksum
    expect_malformed([&] { r.restore(bad); });
  }
  CHECK(r == before);
  r.restore(good);
  CHECK(r == s);
}

TEST_CASE("impossible optimizer states are refused even with a valid checksum") {
  adam const o{};
  optimizer_state<adam> s(o, 8, 1);
  auto p = random_floats(8, 2);
  sluice::step(o, s, p, random_floats(8, 3));
  auto const good = s.save();
  optimizer_state<adam> r(o, 8, 1);
  auto bad = good;
  poke(bad, 9, std::uint8_t{1});  // reserved byte
  expect_malformed([&] { r.restore(bad); });
  bad = good;
  poke(bad, 14, std::uint64_t{1} << 39);  // an element count the bytes do not hold
  expect_malformed([&] { r.restore(bad); });
  bad = good;
  poke(bad, 30 + 8 * 4 + 3 * 4, -1.0f);  // negative second moment of element 3
  expect_malformed([&] { r.restore(bad); });

  adam c{};
  c.sparse = sparse_mode::catch_up;
  optimizer_state<adam> sc(c, 8, 1);
  auto const cg = sc.save();
  bad = cg;
  poke(bad, 22, std::uint64_t{1} << 32);  // past the 32-bit per-entry counters
  optimizer_state<adam> rc(c, 8, 1);
  expect_malformed([&] { rc.restore(bad); });
  bad = cg;
  poke(bad, cg.size() - 8 - 4, std::uint32_t{5});  // an entry stepped after the state (step 0)
  expect_malformed([&] { rc.restore(bad); });
}

TEST_CASE("non-finite moments and moments before the first step are refused behind a valid checksum") {
  // A NaN or Inf moment would reach the parameters at the next step; no step writes one, nor a
  // moment other than 0 at step 0. Offsets: moments from byte 30, element i of moment k at
  // 30 + (k * n + i) * element bytes.
  float const nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  adam const o{};
  optimizer_state<adam> s(o, 8, 1);
  auto p = random_floats(8, 2);
  sluice::step(o, s, p, random_floats(8, 3));
  auto const good = s.save();
  optimizer_state<adam> r(o, 8, 1);
  auto const before = r;
  for (float v : {nan, inf, -inf})
    for (std::size_t k = 0; k < 2; ++k) {
      CAPTURE(v);
      CAPTURE(k);
      auto bad = good;
      poke(bad, 30 + (k * 8 + 5) * 4, v);
      expect_malformed([&] { r.restore(bad); });
    }
  CHECK(r == before);
  // The same record with finite edits is taken: the checks refuse only what no step writes.
  auto fine = good;
  poke(fine, 30 + 5 * 4, 0.25f);
  r.restore(fine);
  CHECK(r.moment(0, 5) == 0.25f);

  // Step 0: every moment is 0.
  optimizer_state<adam> z(o, 8, 1);
  auto zero = z.save();
  poke(zero, 30 + 2 * 4, 1e-3f);
  expect_malformed([&] { r.restore(zero); });

  // bf16 moments (2 bytes each) and SGD's momentum are checked the same way.
  adam b{};
  b.state_type = element_type::bf16;
  optimizer_state<adam> sb(b, 8, 1);
  auto pb = random_floats(8, 4);
  sluice::step(b, sb, pb, random_floats(8, 5));
  auto bad = sb.save();
  poke(bad, 30 + 3 * 2, std::uint16_t{0x7fc0});  // bf16 NaN
  optimizer_state<adam> rb(b, 8, 1);
  expect_malformed([&] { rb.restore(bad); });
  sgd const m{.lr = 0.1, .momentum = 0.9};
  optimizer_state<sgd> sm(m, 8, 1);
  auto pm = random_floats(8, 6);
  sluice::step(m, sm, pm, random_floats(8, 7));
  bad = sm.save();
  poke(bad, 30 + 7 * 4, inf);
  optimizer_state<sgd> rm(m, 8, 1);
  expect_malformed([&] { rm.restore(bad); });
}

TEST_CASE("a step counter at its limit throws instead of wrapping") {
  adam const o{};
  optimizer_state<adam> s(o, 16, 2);
  auto bytes = s.save();
  poke(bytes, 22, std::numeric_limits<std::uint64_t>::max());
  s.restore(bytes);
  CHECK(s.step() == std::numeric_limits<std::uint64_t>::max());
  auto p = random_floats(16, 1);
  auto const p0 = p;
  auto const g = random_floats(16, 2);
  CHECK_THROWS_AS(sluice::step(o, s, p, g), sluice::error);
  CHECK(p == p0);  // nothing written, no NaN
  CHECK(s.step() == std::numeric_limits<std::uint64_t>::max());
  std::vector<tensor_step<adam>> items{{&s, std::span<float>(p), std::span<float const>(g)}};
  CHECK_THROWS_AS(step_all(o, std::span<tensor_step<adam> const>(items)), sluice::error);
  CHECK(p == p0);

  adam c{};
  c.sparse = sparse_mode::catch_up;
  optimizer_state<adam> sc(c, 16, 2);
  bytes = sc.save();
  poke(bytes, 22, optimizer_state<adam>::max_catch_up_step);
  sc.restore(bytes);
  CHECK_THROWS_AS(sluice::step(c, sc, p, g), sluice::error);
  CHECK(p == p0);
}
