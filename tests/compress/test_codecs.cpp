// identity, cast, sign, qsgd, random_k and threshold_top_k: each codec's stated error bound,
// unbiasedness where claimed (within a statistical bound), shared random indices, bad values and
// bad frames.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <sluice/compress/cast.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/compress/qsgd.hpp>
#include <sluice/compress/random_k.hpp>
#include <sluice/compress/sign.hpp>
#include <sluice/compress/threshold_top_k.hpp>

#include "compress/codec_testing.hpp"
#include "support/compress_reference.hpp"

namespace {

using namespace sluice;
using namespace sluice::test;

template <class T>
float f(T v) {
  return static_cast<float>(v);
}

template <class C, class T>
void check_rejects(C const& bad, std::vector<T> const& x) {
  codec_workspace<C, T> ws{};
  std::vector<std::byte> out(1 << 20, std::byte{0x5a});
  expect_errc([&] { (void)bad.encode(std::span<T const>(x), {}, ws, std::span<std::byte>(out)); },
              errc::invalid_argument);
  CHECK(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0x5a}; }));
}

}  // namespace

TEST_CASE_TEMPLATE("identity is bit-exact", T, float, sluice::half, sluice::bfloat16) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{12345}}) {
    auto const x = gaussian<T>(n, 1);
    codec_workspace<identity, T> ws;
    auto const msg = encode(identity{}, x, ws);
    CHECK(msg.size() == identity{}.max_encoded_bytes<T>(n));
    CHECK(decode<T>(identity{}, msg, n, ws) == x);
    std::vector<T> acc(n, T(0.0f));
    sluice::decode_add(identity{}, std::span<std::byte const>(msg), {}, ws, std::span<T>(acc));
    CHECK(acc == x);
    if (n > 0) check_malformed<identity, T>(identity{}, msg, n);
  }
  CHECK(fmt::format("{}", identity{}) == "identity{}");
}

TEST_CASE_TEMPLATE("cast rounds within half an ulp, stochastic cast is unbiased", T, float, sluice::half,
                   sluice::bfloat16) {
  auto const x = gaussian<T>(20000, 2);
  for (auto to : {element_type::f16, element_type::bf16, element_type::f32}) {
    cast const c{.to = to};
    codec_workspace<cast, T> ws;
    auto const msg = encode(c, x, ws);
    CHECK(msg.size() == c.max_encoded_bytes(x.size()));
    auto const y = decode<T>(c, msg, x.size(), ws);
    float const rel = to == element_type::f16 ? 0x1p-11f : to == element_type::bf16 ? 0x1p-8f : 0.0f;
    float const own = std::is_same_v<T, float> ? 0.0f : std::is_same_v<T, sluice::half> ? 0x1p-11f : 0x1p-8f;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!(std::abs(f(x[i]) - f(y[i])) <= std::abs(f(x[i])) * (rel + own) * 1.0001f + 1e-7f)) FAIL("cast at " << i);
    check_malformed<cast, T>(c, msg, x.size());
  }
  check_rejects(cast{.to = static_cast<element_type>(9)}, x);
  check_rejects(cast{.round = static_cast<rounding>(4)}, x);
}

TEST_CASE("stochastic cast to bf16 is unbiased") {
  std::vector<float> const x = {1.0f + 0x1p-10f, -3.3333f, 1e-3f, 123.456f};
  cast const c{.to = element_type::bf16, .round = rounding::stochastic};
  codec_workspace<cast, float> ws;
  int const draws = 4000;
  std::vector<double> mean(x.size());
  for (int d = 0; d < draws; ++d) {
    sluice::encode_context const ctx{.seed = 3, .step = static_cast<std::uint64_t>(d)};
    auto const y = decode<float>(c, encode(c, x, ws, ctx), x.size(), ws, ctx);
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += y[i] / draws;
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    double const ulp = std::abs(x[i]) * 0x1p-7;
    CHECK(std::abs(mean[i] - x[i]) <= 6 * ulp / (2 * std::sqrt(draws)));
  }
}

TEST_CASE_TEMPLATE("sign: +-mean|x| per bucket, squared error ||x||^2 - d scale^2", T, float, sluice::half,
                   sluice::bfloat16) {
  for (std::size_t bucket : {std::size_t{1}, std::size_t{100}, std::size_t{1024}}) {
    sign const c{.bucket = bucket};
    auto const x = gaussian<T>(5003, 3);
    codec_workspace<sign, T> ws;
    auto const msg = encode(c, x, ws);
    CHECK(msg.size() == c.max_encoded_bytes(x.size()));
    auto const yt = decode<T>(c, msg, x.size(), ws);
    std::vector<float> y(yt.size());
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = f(yt[i]);
    double const rt = std::is_same_v<T, float> ? 1e-5 : 0x1p-8;
    for (std::size_t b = 0; b * bucket < x.size(); ++b) {
      std::size_t const first = b * bucket, len = std::min(bucket, x.size() - first);
      double l1 = 0, l2 = 0, err = 0;
      for (std::size_t j = first; j < first + len; ++j) l1 += std::abs(f(x[j])), l2 += f(x[j]) * f(x[j]);
      double const scale = l1 / static_cast<double>(len);
      for (std::size_t j = first; j < first + len; ++j) {
        CHECK(std::abs(std::abs(y[j]) - scale) <= rt * scale + 1e-30);
        CHECK((y[j] < 0) == (f(x[j]) < 0));
        err += (f(x[j]) - y[j]) * (f(x[j]) - y[j]);
      }
      CHECK(std::abs(err - (l2 - static_cast<double>(len) * scale * scale)) <= 10 * rt * l2 + 1e-12);
    }
    check_malformed<sign, T>(c, msg, x.size());
  }
  auto const x = gaussian<T>(100, 1);
  check_rejects(sign{.bucket = 0}, x);
  check_rejects(sign{.bucket = 5000}, x);
}

TEST_CASE_TEMPLATE("qsgd is unbiased and within norm/s", T, float, sluice::half, sluice::bfloat16) {
  qsgd const c{.levels = 3, .bucket = 64};
  auto const x = gaussian<T>(200, 4);
  codec_workspace<qsgd, T> ws;
  int const draws = 3000;
  std::vector<double> mean(x.size());
  std::vector<double> norm(4);
  for (std::size_t i = 0; i < x.size(); ++i) norm[i / 64] += f(x[i]) * f(x[i]);
  for (auto& v : norm) v = std::sqrt(v);
  for (int d = 0; d < draws; ++d) {
    sluice::encode_context const ctx{.seed = 8, .step = static_cast<std::uint64_t>(d)};
    auto const msg = encode(c, x, ws, ctx);
    auto const y = decode<T>(c, msg, x.size(), ws, ctx);
    for (std::size_t i = 0; i < x.size(); ++i) {
      double const bound = norm[i / 64] / 3.0 * 1.0001 + std::abs(f(y[i])) * 0x1p-8;
      if (!(std::abs(f(x[i]) - f(y[i])) <= bound)) FAIL("qsgd bound at " << i);
      mean[i] += f(y[i]) / draws;
    }
  }
  // Variance of one draw <= (norm / s)^2 / 4; six standard errors, plus T's rounding of the levels.
  for (std::size_t i = 0; i < x.size(); ++i) {
    double const tol = 6.0 * (norm[i / 64] / 3.0) / (2.0 * std::sqrt(draws)) + norm[i / 64] * 0x1p-8;
    CHECK(std::abs(mean[i] - f(x[i])) <= tol);
  }
  check_malformed<qsgd, T>(c, encode(c, x, ws), x.size());
  check_rejects(qsgd{.levels = 0}, x);
  check_rejects(qsgd{.levels = 128}, x);
  check_rejects(qsgd{.bucket = 0}, x);
}

TEST_CASE_TEMPLATE("random_k: same indices on every rank, new ones every step, unbiased with rescale", T, float,
                   sluice::half, sluice::bfloat16) {
  std::size_t const n = 10007;
  auto const x = gaussian<T>(n, 5);
  random_k const c{.ratio = 0.01};
  random_k::workspace<T> a, b;
  c.draw(n, 42, 7, 3, a);
  c.draw(n, 42, 7, 3, b);
  std::size_t const k = c.keep(n);
  std::vector<std::uint32_t> const ia(a.indices.begin(), a.indices.begin() + static_cast<std::ptrdiff_t>(k));
  CHECK(std::is_sorted(ia.begin(), ia.end()));
  CHECK(std::adjacent_find(ia.begin(), ia.end()) == ia.end());
  CHECK(std::equal(ia.begin(), ia.end(), b.indices.begin()));
  c.draw(n, 42, 8, 3, b);
  CHECK(!std::equal(ia.begin(), ia.end(), b.indices.begin()));
  c.draw(n, 43, 7, 3, b);
  CHECK(!std::equal(ia.begin(), ia.end(), b.indices.begin()));

  // Rank 0 encodes, rank 5 decodes with its own context: the indices agree.
  auto const msg = encode(c, x, a, {.seed = 42, .rank = 0, .step = 7, .tensor = 3});
  CHECK(msg.size() == c.max_encoded_bytes<T>(n));
  auto const y = decode<T>(c, msg, n, b, {.seed = 42, .rank = 5, .step = 7, .tensor = 3});
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bool const sel = std::binary_search(ia.begin(), ia.end(), static_cast<std::uint32_t>(i));
    CHECK(f(y[i]) == (sel ? f(x[i]) : 0.0f));
    nonzero += sel;
  }
  CHECK(nonzero == k);
  sparse_buffer<T> sb;
  c.decode_sparse(std::span<std::byte const>(msg), {.seed = 42, .rank = 9, .step = 7, .tensor = 3}, b, sb);
  CHECK(std::equal(ia.begin(), ia.end(), sb.indices().begin(), sb.indices().end()));
  check_malformed<random_k, T>(c, msg, n, {.seed = 42, .step = 7, .tensor = 3});
  check_rejects(random_k{.ratio = 0.0}, x);
  check_rejects(random_k{.ratio = 1.01}, x);
}

TEST_CASE("random_k picks every element with probability k/n and rescale makes it unbiased") {
  std::size_t const n = 50;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i) - 20.0f;
  random_k const c{.ratio = 0.2, .rescale = true};
  random_k::workspace<float> ws;
  int const draws = 4000;
  std::vector<double> mean(n);
  for (int d = 0; d < draws; ++d) {
    auto const y = decode<float>(c, encode(c, x, ws, {.seed = 1, .step = static_cast<std::uint64_t>(d)}), n, ws,
                                 {.seed = 1, .step = static_cast<std::uint64_t>(d)});
    for (std::size_t i = 0; i < n; ++i) mean[i] += y[i] / draws;
  }
  // Each draw of element i is x_i * n/k with probability k/n, else 0: variance x_i^2 (n/k - 1).
  for (std::size_t i = 0; i < n; ++i)
    CHECK(std::abs(mean[i] - x[i]) <= 6 * std::abs(x[i]) * 2.0 / std::sqrt(draws) + 1e-6);
}

TEST_CASE_TEMPLATE("threshold_top_k keeps a top set whose size is within tolerance of k", T, float, sluice::half,
                   sluice::bfloat16) {
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{200003}}) {
    auto const x = gaussian<T>(n, 6);
    for (double tol : {0.0, 0.1, 0.5}) {
      threshold_top_k const c{.ratio = 0.01, .sample = 0.01, .tolerance = tol};
      threshold_top_k::workspace<T> ws;
      auto const msg = encode(c, x, ws);
      std::size_t const k = c.keep(n);
      CHECK(ws.count >= static_cast<std::size_t>(std::ceil(static_cast<double>(k) * (1 - tol))));
      CHECK(ws.count <= c.max_keep(n));
      // The kept set is a top set: exactly the reference top-count.
      auto const ref = reference_top_k(x, ws.count);
      CHECK(std::equal(ref.begin(), ref.end(), ws.indices.begin()));
      if (tol == 0.0) CHECK(ws.count == k);
      sparse_buffer<T> sb;
      c.decode_sparse(std::span<std::byte const>(msg), {}, ws, sb);
      CHECK(std::vector<std::uint32_t>(sb.indices().begin(), sb.indices().end()) == ref);
      auto const y = decode<T>(c, msg, n, ws);
      for (auto i : ref) CHECK(f(y[i]) == f(x[i]));
      if (n > 1000 && tol == 0.1) check_malformed<threshold_top_k, T>(c, msg, n);
    }
  }
  auto const x = gaussian<T>(100, 1);
  check_rejects(threshold_top_k{.ratio = 0.0}, x);
  check_rejects(threshold_top_k{.sample = 0.0}, x);
  check_rejects(threshold_top_k{.tolerance = 1.0}, x);
  check_rejects(threshold_top_k{.tolerance = -0.1}, x);
}

TEST_CASE("threshold_top_k fixes up a threshold ruined by ties") {
  std::vector<float> x(100000, 1.0f);
  for (std::size_t i = 0; i < x.size(); i += 1000) x[i] = 2.0f;
  threshold_top_k const c{.ratio = 0.01, .tolerance = 0.1};
  threshold_top_k::workspace<float> ws;
  (void)encode(c, x, ws);
  CHECK(ws.fixed_up);
  CHECK(ws.count == 1000);
  auto const ref = reference_top_k(x, 1000);
  CHECK(std::equal(ref.begin(), ref.end(), ws.indices.begin()));
}

TEST_CASE("policies print") {
  CHECK(fmt::format("{}", cast{}) == "cast{.to = f16, .round = nearest}");
  CHECK(fmt::format("{}", sign{}) == "sign{.bucket = 1024}");
  CHECK(fmt::format("{}", qsgd{}) == "qsgd{.levels = 7, .bucket = 512}");
  CHECK(fmt::format("{}", random_k{}) == "random_k{.ratio = 0.01, .rescale = false}");
  CHECK(fmt::format("{}", threshold_top_k{}) == "threshold_top_k{.ratio = 0.01, .sample = 0.01, .tolerance = 0.25}");
}
