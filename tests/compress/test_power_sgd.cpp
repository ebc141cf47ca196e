// power_sgd: projection error bound, exact recovery of low-rank matrices with warm start, dense
// fallback for vectors, bit-exact checkpoint of the warm-start state, bad values and frames.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <sluice/compress/power_sgd.hpp>

#include "compress/codec_testing.hpp"
#include "support/compress_reference.hpp"

namespace {

using sluice::power_sgd;
using namespace sluice::test;

double norm2(std::vector<float> const& a) {
  double s = 0;
  for (float v : a) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

template <class T>
double diff2(std::vector<T> const& a, std::vector<T> const& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double const d = static_cast<double>(static_cast<float>(a[i])) - static_cast<float>(b[i]);
    s += d * d;
  }
  return std::sqrt(s);
}

}  // namespace

TEST_CASE_TEMPLATE("power_sgd: projection bound and exact low-rank recovery", T, float, sluice::half,
                   sluice::bfloat16) {
  std::size_t const rows = 64, cols = 96;
  std::size_t const shape[2] = {rows, cols};
  sluice::encode_context const ctx{.seed = 3, .tensor = 2, .shape = shape};
  power_sgd const c{.rank = 3};
  CHECK(c.uses_low_rank<T>(rows * cols, shape));

  auto const noise = gaussian<T>(rows * cols, 1);
  power_sgd::workspace<T> ws;
  auto const y = decode<T>(c, encode(c, noise, ws, ctx), rows * cols, ws, ctx);
  std::vector<float> nf(noise.size());
  for (std::size_t i = 0; i < nf.size(); ++i) nf[i] = static_cast<float>(noise[i]);
  CHECK(diff2(noise, y) <= norm2(nf) * 1.001);

  // A rank-2 matrix is recovered after a few warm-started steps.
  auto const u = gaussian<float>(rows * 2, 2), v = gaussian<float>(cols * 2, 3);
  std::vector<T> low(rows * cols);
  std::vector<float> lowf(rows * cols);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      lowf[i * cols + j] = static_cast<float>(T(u[i * 2] * v[j * 2] + u[i * 2 + 1] * v[j * 2 + 1]));
      low[i * cols + j] = T(lowf[i * cols + j]);
    }
  power_sgd::workspace<T> w2;
  double err = 0;
  for (int step = 0; step < 3; ++step) {
    auto const msg = encode(c, low, w2, ctx);
    CHECK(msg.size() == c.low_rank_bytes(rows, cols));
    err = diff2(low, decode<T>(c, msg, rows * cols, w2, ctx));
  }
  double const tol = std::is_same_v<T, float> ? 1e-4 : 2e-2;
  CHECK(err <= tol * norm2(lowf));
}

TEST_CASE_TEMPLATE("power_sgd falls back to exact dense frames for vectors", T, float, sluice::half, sluice::bfloat16) {
  power_sgd const c{};
  auto const x = gaussian<T>(1000, 4);
  power_sgd::workspace<T> ws;
  auto const msg = encode(c, x, ws);
  CHECK(decode<T>(c, msg, x.size(), ws) == x);
  std::size_t const thin[2] = {500, 2};  // rank 4 >= min(rows, cols): dense too
  sluice::encode_context const ctx{.shape = thin};
  CHECK(decode<T>(c, encode(c, x, ws, ctx), x.size(), ws) == x);
  check_malformed<power_sgd, T>(c, msg, x.size());
}

TEST_CASE("power_sgd warm-start state is checkpointed bit-exactly") {
  std::size_t const shape[2] = {40, 50};
  sluice::encode_context ctx{.seed = 9, .tensor = 1, .shape = shape};
  power_sgd const c{.rank = 2};
  power_sgd::workspace<float> a, b;
  auto const x = gaussian<float>(2000, 5);
  (void)encode(c, x, a, ctx);
  std::vector<std::byte> state(a.state_bytes());
  a.save(state);
  b.restore(state);
  ctx.step = 1;
  auto const x2 = gaussian<float>(2000, 6);
  CHECK(encode(c, x2, a, ctx) == encode(c, x2, b, ctx));
  std::vector<std::byte> bad(state.begin(), state.end() - 4);
  expect_errc([&] { b.restore(bad); }, sluice::errc::malformed_message);

  auto const msg = encode(c, x, a, ctx);
  check_malformed<power_sgd, float>(c, msg, x.size(), ctx);
  std::vector<std::byte> out(c.max_encoded_bytes(x.size()), std::byte{0x5a});
  expect_errc([&] { (void)power_sgd{.rank = 0}.encode(std::span<float const>(x), ctx, a, std::span(out)); },
              sluice::errc::invalid_argument);
  CHECK(std::all_of(out.begin(), out.end(), [](std::byte v) { return v == std::byte{0x5a}; }));
  CHECK(fmt::format("{}", c) == "power_sgd{.rank = 2}");
}
