// The bandwidth reference of bench/support/bench.hpp: over a kernel's own arrays it must read and
// rewrite every word without changing a value (the benchmarks' data stays valid), zero the
// write-only arrays, touch nothing past its whole steps, and refuse arrays that do not match the
// declared traffic.
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "support/bench.hpp"

namespace {

using sluice::bench::array_ref;
using sluice::bench::kernel_arrays;
using sluice::bench::traffic;
using sluice::bench::detail::reference_kernel;
using sluice::bench::detail::step_elements;

std::vector<std::uint64_t> pattern(std::size_t words, std::uint64_t seed) {
  std::vector<std::uint64_t> v(words);
  for (std::size_t i = 0; i < words; ++i) v[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  return v;
}

}  // namespace

TEST_CASE("reference over kernel arrays keeps read and update values, zeroes writes, every body") {
  // Widths of 4, 2, 0.5 and 0.125 bytes per element: whole vectors, half vectors, and words that
  // do not divide into the line chunks (the end-of-step path). 3 steps plus a partial one.
  std::size_t const steps = 3, elements = steps * step_elements + 100;
  auto words = [&](double width) { return static_cast<std::size_t>(width * static_cast<double>(elements) / 8) + 1; };
  auto g = pattern(words(4), 1), p = pattern(words(4), 2), m = pattern(words(2), 3);
  auto out = pattern(words(0.5), 4), flags = pattern(words(0.125), 5);
  auto const g0 = g, p0 = p, m0 = m, out0 = out, flags0 = flags;
  kernel_arrays const a{.elements = elements,
                        .read = {{g.data(), 4}},
                        .update = {{p.data(), 4}, {m.data(), 2}},
                        .write = {{out.data(), 0.5}, {flags.data(), 0.125}}};
  reference_kernel ref(a, traffic{.read = 4, .update = 6, .write = 0.625});
  for (int body = 0; body < sluice::bench::detail::reference_bodies; ++body) {
    if (!reference_kernel::has_body(body)) continue;
    CAPTURE(body);
    out = out0, flags = flags0;
    double const rate = ref.pass(body);
    CHECK(rate > 0);
    CHECK(g == g0);
    CHECK(p == p0);
    CHECK(m == m0);
    // Write streams: zero over the whole steps, untouched after them.
    auto check_written = [&](std::vector<std::uint64_t> const& v, std::vector<std::uint64_t> const& v0, double w) {
      auto const done = static_cast<std::size_t>(w * steps * step_elements / 8);
      for (std::size_t i = 0; i < v.size(); ++i) {
        CAPTURE(i);
        CHECK(v[i] == (i < done ? 0 : v0[i]));
      }
    };
    check_written(out, out0, 0.5);
    check_written(flags, flags0, 0.125);
  }
}

TEST_CASE("reference over kernel arrays refuses arrays that do not match the traffic") {
  std::vector<std::uint64_t> x(4 * step_elements), y(4 * step_elements);
  auto make = [&](kernel_arrays const& a, traffic const& t) { reference_kernel ref(a, t); };
  // Widths that do not add up to the traffic.
  CHECK_THROWS_AS(make({.elements = step_elements, .read = {{x.data(), 4}}}, traffic{.read = 8}),
                  std::invalid_argument);
  CHECK_THROWS_AS(make({.elements = step_elements, .update = {{x.data(), 4}, {y.data(), 4}}}, traffic{.update = 4}),
                  std::invalid_argument);
  // Fewer elements than one step; a null array; a misaligned one; a width under one word per step.
  CHECK_THROWS_AS(make({.elements = step_elements - 1, .read = {{x.data(), 4}}}, traffic{.read = 4}),
                  std::invalid_argument);
  CHECK_THROWS_AS(make({.elements = step_elements, .read = {{nullptr, 4}}}, traffic{.read = 4}), std::invalid_argument);
  CHECK_THROWS_AS(
      make({.elements = step_elements, .read = {{reinterpret_cast<std::byte*>(x.data()) + 4, 4}}}, traffic{.read = 4}),
      std::invalid_argument);
  CHECK_THROWS_AS(make({.elements = step_elements, .write = {{x.data(), 0.01}}}, traffic{.write = 0.01}),
                  std::invalid_argument);
  // A matching set is accepted.
  CHECK_NOTHROW(make({.elements = step_elements, .read = {{x.data(), 4}}, .write = {{y.data(), 4}}},
                     traffic{.read = 4, .write = 4}));
}
