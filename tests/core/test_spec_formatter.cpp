// Formatters built on detail::spec_formatter (fmt/core.h only) honour the caller's spec as
// fmt's own string and double formatters do.
#include <doctest/doctest.h>

#include <chrono>
#include <string_view>

#include <fmt/core.h>

#include <sluice/feedback/state.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/transport/concepts.hpp>

TEST_CASE("names print with the caller's width, fill and alignment") {
  CHECK(fmt::format("{}", sluice::sparse_mode::catch_up) == "catch_up");
  CHECK(fmt::format("[{:>10}]", sluice::sparse_mode::lazy) == fmt::format("[{:>10}]", std::string_view("lazy")));
  CHECK(fmt::format("[{:*^9}]", sluice::sparse_mode::lazy) == "[**lazy***]");
  CHECK(fmt::format("{:.3}", sluice::sparse_mode::catch_up) == "cat");
  CHECK(fmt::format("{}", sluice::non_finite_policy{}) == sluice::to_string(sluice::non_finite_policy{}));
}

TEST_CASE("a deadline prints its remaining seconds with the caller's precision") {
  auto const d = sluice::deadline::after(std::chrono::hours(1));
  CHECK(fmt::format("{:.0f}", d) == "3600");
  CHECK(fmt::format("{:>8.1e}", d) == " 3.6e+03");
}

TEST_CASE("a spec the value's type rejects throws fmt's error when formatting") {
  CHECK_THROWS(fmt::format(fmt::runtime("{:d}"), sluice::sparse_mode::lazy));
  CHECK_THROWS(fmt::format(fmt::runtime("{:{}}"), sluice::sparse_mode::lazy, 3));
}
