// Element conversions: exact widening, round-to-nearest-even narrowing, unbiased stochastic rounding.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <sluice/core/element.hpp>
#include <sluice/core/random.hpp>

using sluice::from_float;
using sluice::from_float_stochastic;
using sluice::to_float;

TEST_CASE("element type ids and sizes") {
  CHECK(sluice::element_type_of<float> == sluice::element_type::f32);
  CHECK(sluice::element_type_of<sluice::half const> == sluice::element_type::f16);
  CHECK(sluice::element_type_of<sluice::bfloat16> == sluice::element_type::bf16);
  CHECK(sluice::size_of(sluice::element_type::bf16) == 2);
  CHECK(sluice::to_string(sluice::element_type::f16) == "f16");
  static_assert(sluice::Element<float> && sluice::Element<sluice::half> && !sluice::Element<double>);
}

TEST_CASE_TEMPLATE("round-to-nearest-even narrowing", T, sluice::half, sluice::bfloat16) {
  // 1 + half an ulp rounds to even (down), 1 + 1.5 ulp rounds up to 1 + 2 ulp.
  float const ulp = std::is_same_v<T, sluice::half> ? 0x1p-10f : 0x1p-7f;
  CHECK(to_float(from_float<T>(1.0f + 0.5f * ulp)) == 1.0f);
  CHECK(to_float(from_float<T>(1.0f + 1.5f * ulp)) == 1.0f + 2 * ulp);
  CHECK(std::isnan(to_float(from_float<T>(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(to_float(from_float<T>(std::numeric_limits<float>::infinity()))));
}

TEST_CASE_TEMPLATE("stochastic rounding picks a neighbour and is unbiased", T, sluice::half, sluice::bfloat16) {
  sluice::random_stream const rs(sluice::stream_key{.seed = 42});
  for (float const x : {1.0f + 0.3f * 0x1p-7f, -3.14159f, 1e-3f, 7.77e-6f, 123.456f}) {
    T const nearest = from_float<T>(x);
    double sum = 0;
    int constexpr draws = 200000;
    float lo = std::numeric_limits<float>::max(), hi = -lo;
    for (int i = 0; i < draws; ++i) {
      float const y = to_float(from_float_stochastic<T>(x, rs.word(static_cast<std::uint64_t>(i))));
      lo = std::min(lo, y);
      hi = std::max(hi, y);
      sum += y;
    }
    // Only the two neighbours of x ever appear.
    CHECK(lo <= x);
    CHECK(hi >= x);
    CHECK((lo == to_float(nearest) || hi == to_float(nearest)));
    double const gap = static_cast<double>(hi) - static_cast<double>(lo);
    // Mean within 5 standard errors of x (a Bernoulli with spread `gap` has sd <= gap / 2).
    double const mean = sum / draws;
    CHECK(std::abs(mean - static_cast<double>(x)) <= 5.0 * (gap / 2) / std::sqrt(double(draws)) + 1e-12);
  }
}

TEST_CASE_TEMPLATE("stochastic rounding keeps exact values and non-finite values", T, sluice::half, sluice::bfloat16) {
  CHECK(to_float(from_float_stochastic<T>(1.5f, 0xffffffffu)) == 1.5f);
  CHECK(std::isnan(to_float(from_float_stochastic<T>(std::numeric_limits<float>::quiet_NaN(), 0x12345678u))));
  CHECK(std::isinf(to_float(from_float_stochastic<T>(-std::numeric_limits<float>::infinity(), 0xffffffffu))));
  CHECK(to_float(from_float_stochastic<float>(0.1f, 7u)) == 0.1f);
}
