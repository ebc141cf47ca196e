// maxmin_quantize: round-to-nearest error <= unit/2 everywhere, stochastic rounding unbiased within
// a statistical bound, tight packing for every width and bucket alignment, bad values and frames.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <sluice/compress/detail/pack.hpp>
#include <sluice/compress/maxmin_quantize.hpp>

#include "compress/codec_testing.hpp"
#include "support/compress_reference.hpp"

namespace {

using sluice::maxmin_quantize;
using sluice::rounding;
using namespace sluice::test;

// Half an ulp of T at |v| (0 for float): the narrowing of the decoded value.
template <class T>
float narrowing(float v) {
  if constexpr (std::is_same_v<T, float>)
    return 0.0f;
  else
    return std::abs(v) * (std::is_same_v<T, sluice::half> ? 0x1p-11f : 0x1p-8f) + 1e-7f;
}

template <class T>
void check_bound(maxmin_quantize const& c, std::vector<T> const& x, std::vector<T> const& y, double unit_factor) {
  for (std::size_t b = 0; b * c.bucket < x.size(); ++b) {
    std::size_t const first = b * c.bucket, len = std::min(c.bucket, x.size() - first);
    float mn = INFINITY, mx = -INFINITY;
    for (std::size_t j = 0; j < len; ++j) {
      mn = std::min(mn, static_cast<float>(x[first + j]));
      mx = std::max(mx, static_cast<float>(x[first + j]));
    }
    float const unit = (mx - mn) / static_cast<float>((1u << c.bits) - 1);
    float const grid = 4 * std::numeric_limits<float>::epsilon() * std::max(std::abs(mn), std::abs(mx));
    for (std::size_t j = 0; j < len; ++j) {
      float const xv = static_cast<float>(x[first + j]), yv = static_cast<float>(y[first + j]);
      double const bound = unit_factor * unit * (1 + 2e-4) + grid + narrowing<T>(yv);
      if (!(std::abs(xv - yv) <= bound)) FAIL("element " << first + j << ": |" << xv << " - " << yv << "| > " << bound);
    }
  }
}

}  // namespace

TEST_CASE("bit packing round-trips every width at every bit offset") {
  std::vector<std::uint8_t> codes(203), back(203);
  for (unsigned bits = 1; bits <= 8; ++bits) {
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>((i * 37 + 11) % (1u << bits));
    CHECK(sluice::detail::compress::packed_bytes(codes.size(), bits) == (codes.size() * bits + 7) / 8);
    for (std::size_t off : {std::size_t{0}, std::size_t{3}, std::size_t{8}, std::size_t{13}}) {
      std::vector<std::byte> buf(sluice::detail::compress::packed_bytes(codes.size() + off, bits) + 1, std::byte{0});
      sluice::detail::compress::pack_codes_at(codes.data(), codes.size(), bits, buf.data(), off * bits);
      CHECK(buf.back() == std::byte{0});
      sluice::detail::compress::unpack_codes_at(buf.data(), codes.size(), bits, off * bits, back.data());
      CHECK(back == codes);
    }
  }
}

TEST_CASE_TEMPLATE("maxmin_quantize round-to-nearest error <= unit/2 everywhere", T, float, sluice::half,
                   sluice::bfloat16) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{5000}, std::size_t{20001}})
    for (unsigned bits = 1; bits <= 8; ++bits)
      for (std::size_t bucket : {std::size_t{64}, std::size_t{100}, std::size_t{1024}, std::size_t{4096}}) {
        maxmin_quantize const c{.bits = bits, .bucket = bucket};
        auto const x = gaussian<T>(n, static_cast<unsigned>(n + bits));
        sluice::codec_workspace<maxmin_quantize, T> ws;
        auto const msg = encode(c, x, ws, {.seed = 1});
        CHECK(msg.size() == c.max_encoded_bytes(n));
        CAPTURE(n);
        CAPTURE(bits);
        CAPTURE(bucket);
        check_bound(c, x, decode<T>(c, msg, n, ws), 0.5);
        std::vector<T> acc(n, T(0.0f));
        sluice::decode_add(c, std::span<std::byte const>(msg), {}, ws, std::span<T>(acc));
        CHECK(acc == decode<T>(c, msg, n, ws));
      }
}

// The kernels run the baseline or the AVX2 body (ctest runs this binary both ways, see
// SLUICE_SIMD); either must give exactly the grid and the levels of the scalar formula.
TEST_CASE("maxmin_quantize round-to-nearest matches the scalar formula bit for bit") {
  CAPTURE(static_cast<int>(sluice::simd_level()));
  for (std::size_t n : {std::size_t{31}, std::size_t{1000}, std::size_t{4133}, std::size_t{70001}})
    for (unsigned bits : {1u, 3u, 4u, 8u})
      for (std::size_t bucket : {std::size_t{64}, std::size_t{100}, std::size_t{1024}}) {
        CAPTURE(n);
        CAPTURE(bits);
        CAPTURE(bucket);
        maxmin_quantize const c{.bits = bits, .bucket = bucket};
        auto x = gaussian<float>(n, static_cast<unsigned>(3 * n + bits), 1e-3f);
        x[n / 2] = 7.5f;  // one wide bucket
        sluice::codec_workspace<maxmin_quantize, float> ws;
        auto const msg = encode(c, x, ws, {.seed = 1});
        auto const y = decode<float>(c, msg, n, ws);
        float const maxq = static_cast<float>((1u << bits) - 1u);
        std::size_t bad = 0;
        for (std::size_t first = 0; first < n; first += bucket) {
          std::size_t const len = std::min(bucket, n - first);
          float mn = x[first], mx = x[first];
          for (std::size_t j = 1; j < len; ++j) mn = std::min(mn, x[first + j]), mx = std::max(mx, x[first + j]);
          float const unit = (mx - mn) / maxq, inv = 1.0f / unit;
          for (std::size_t j = 0; j < len; ++j) {
            float v = (x[first + j] - mn) * inv;  // two roundings: no FMA here either
            v = v + 0.5f;
            v = std::min(std::max(v, 0.0f), maxq);
            float const expect = mn + static_cast<float>(static_cast<int>(v)) * unit;
            bad += y[first + j] == expect ? 0 : 1;
          }
        }
        CHECK(bad == 0);
      }
}

// Levels on grids where the arithmetic leaves [0, maxq]: a range too wide for fp32 (max - min
// overflows: the grid is capped at [min, min + FLT_MAX], (x - min) overflows for the far end) and a
// subnormal-sized one.
// Every body must give the levels of the scalar formula (NaN and negatives to 0, above to maxq).
TEST_CASE("maxmin_quantize levels match the scalar formula on extreme grids") {
  CAPTURE(static_cast<int>(sluice::simd_level()));
  std::size_t const n = 4096;
  auto x = gaussian<float>(n, 5, 1e-3f);
  x[3] = -3e38f, x[40] = 3e38f;                                                         // bucket 0: max - min = inf
  for (std::size_t j = 1024; j < 2048; ++j) x[j] = static_cast<float>(j % 7) * 1e-44f;  // subnormal range
  x[2048] = 1e-30f, x[2049] = -1e-30f;
  for (unsigned bits : {4u, 8u}) {
    CAPTURE(bits);
    maxmin_quantize const c{.bits = bits};
    sluice::codec_workspace<maxmin_quantize, float> ws;
    auto const msg = encode(c, x, ws);
    auto const f = sluice::wire::parse(msg);
    std::vector<std::uint8_t> codes(n);
    sluice::detail::compress::unpack_codes(f.sections[2].data(), n, bits, codes.data());
    float const maxq = static_cast<float>((1u << bits) - 1u);
    std::size_t bad = 0;
    for (std::size_t first = 0; first < n; first += c.bucket) {
      float mn = x[first], mx = x[first];
      for (std::size_t j = 1; j < c.bucket; ++j) mn = std::min(mn, x[first + j]), mx = std::max(mx, x[first + j]);
      // The grid as sent: (max - min) / maxq, or for bucket 0 (range past FLT_MAX) the finite
      // grid [min, min + FLT_MAX].
      float unit;
      std::memcpy(&unit, f.sections[1].data() + 8 * (first / c.bucket) + 4, 4);
      CHECK(std::isfinite(unit * maxq));
      if (std::isfinite(mx - mn)) CHECK(unit == (mx - mn) / maxq);
      float const inv = 1.0f / unit;
      for (std::size_t j = 0; j < c.bucket; ++j) {
        float v = std::isfinite(inv) ? (x[first + j] - mn) * inv : (x[first + j] - mn) / unit;
        v = v + 0.5f;
        v = v > 0.0f ? v : 0.0f;
        v = v < maxq ? v : maxq;
        bad += codes[first + j] == static_cast<std::uint8_t>(static_cast<int>(v)) ? 0 : 1;
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("maxmin_quantize stochastic rounding is unbiased and within one unit") {
  std::size_t const n = 300;  // three buckets of 128, the last partial
  auto const x = gaussian<float>(n, 7);
  maxmin_quantize const c{.bits = 2, .bucket = 128, .round = rounding::stochastic};
  sluice::codec_workspace<maxmin_quantize, float> ws;
  int const draws = 4000;
  std::vector<double> mean(n, 0.0);
  for (int d = 0; d < draws; ++d) {
    sluice::encode_context const ctx{.seed = 5, .rank = 1, .step = static_cast<std::uint64_t>(d)};
    auto const msg = encode(c, x, ws, ctx);
    auto const y = decode<float>(c, msg, n, ws, ctx);
    if (d < 50) check_bound(c, x, y, 1.0);
    for (std::size_t i = 0; i < n; ++i) mean[i] += y[i] / draws;
  }
  for (std::size_t b = 0; b < 3; ++b) {
    std::size_t const first = b * 128, len = std::min<std::size_t>(128, n - first);
    float const mn = *std::min_element(x.begin() + static_cast<std::ptrdiff_t>(first),
                                       x.begin() + static_cast<std::ptrdiff_t>(first + len));
    float const mx = *std::max_element(x.begin() + static_cast<std::ptrdiff_t>(first),
                                       x.begin() + static_cast<std::ptrdiff_t>(first + len));
    double const unit = (mx - mn) / 3.0;
    // Variance of one stochastic rounding <= unit^2 / 4: 6 standard errors of the mean.
    double const tol = 6.0 * unit / (2.0 * std::sqrt(static_cast<double>(draws)));
    for (std::size_t i = first; i < first + len; ++i) CHECK(std::abs(mean[i] - x[i]) <= tol);
  }
}

TEST_CASE("maxmin_quantize is deterministic in the key and differs across steps") {
  auto const x = gaussian<float>(10000, 3);
  maxmin_quantize const c{.bits = 3, .bucket = 512, .round = rounding::stochastic};
  sluice::codec_workspace<maxmin_quantize, float> ws;
  auto const a = encode(c, x, ws, {.seed = 9, .step = 2, .tensor = 1});
  auto const b = encode(c, x, ws, {.seed = 9, .step = 2, .tensor = 1});
  auto const s = encode(c, x, ws, {.seed = 9, .step = 3, .tensor = 1});
  CHECK(a == b);
  CHECK(std::vector<std::byte>(a.begin() + 80, a.end()) != std::vector<std::byte>(s.begin() + 80, s.end()));
}

TEST_CASE("maxmin_quantize frames past the single-pass checksum limit carry the from-scratch checksum") {
  // The encoder hashes checksum blocks of its level bytes as it writes them, per thread; the
  // stored value must be the one a receiver recomputes, for aligned and unaligned buckets.
  std::size_t const n = (std::size_t{3} << 20) + 777;
  auto const x = gaussian<float>(n, 12, 1e-3f);
  for (auto const& c : {maxmin_quantize{.bits = 4}, maxmin_quantize{.bits = 3, .bucket = 100},
                        maxmin_quantize{.bits = 2, .bucket = 1000, .round = rounding::stochastic}}) {
    CAPTURE(fmt::format("{}", c));
    sluice::codec_workspace<maxmin_quantize, float> ws;
    auto const msg = encode(c, x, ws, {.seed = 3});
    REQUIRE(msg.size() > 2 * sluice::detail::wire::checksum_block + sluice::wire::header_bytes);
    std::uint64_t stored = 0;
    std::memcpy(&stored, msg.data() + 72, 8);
    CHECK(stored == sluice::detail::wire::frame_checksum(msg));
    auto const y = decode<float>(c, msg, n, ws);
    CHECK(y.size() == n);
  }
}

TEST_CASE("maxmin_quantize surfaces NaN and Inf as NaN buckets") {
  auto x = gaussian<float>(3000, 4);
  x[10] = std::numeric_limits<float>::quiet_NaN();
  x[2000] = std::numeric_limits<float>::infinity();
  maxmin_quantize const c{};
  sluice::codec_workspace<maxmin_quantize, float> ws;
  auto const y = decode<float>(c, encode(c, x, ws), x.size(), ws);
  CHECK(std::isnan(y[0]));
  CHECK(std::isnan(y[1023]));
  CHECK(std::isnan(y[1024]));
  CHECK(std::isnan(y[2047]));
  CHECK(std::isfinite(y[2048]));
  CHECK(std::isfinite(y[2999]));
}

TEST_CASE_TEMPLATE("maxmin_quantize rejects bad values before writing and bad frames", T, float, sluice::half,
                   sluice::bfloat16) {
  auto const x = gaussian<T>(5000, 2);
  sluice::codec_workspace<maxmin_quantize, T> ws;
  for (auto bad : {maxmin_quantize{.bits = 0}, maxmin_quantize{.bits = 9}, maxmin_quantize{.bucket = 0},
                   maxmin_quantize{.bucket = 63}, maxmin_quantize{.bucket = 4097},
                   maxmin_quantize{.round = static_cast<rounding>(3)}}) {
    std::vector<std::byte> out(100000, std::byte{0x5a});
    expect_errc([&] { (void)bad.encode(std::span<T const>(x), {}, ws, std::span<std::byte>(out)); },
                sluice::errc::invalid_argument);
    CHECK(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0x5a}; }));
  }
  maxmin_quantize const c{.bits = 3, .bucket = 200};
  check_malformed<maxmin_quantize, T>(c, encode(c, x, ws), x.size());
}

TEST_CASE("maxmin_quantize prints") {
  CHECK(fmt::format("{}", maxmin_quantize{}) == "maxmin_quantize{.bits = 4, .bucket = 1024, .round = nearest}");
}
