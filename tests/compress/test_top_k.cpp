// top_k: the selection equals a sort-based reference exactly (ties, NaN, Inf, edge sizes, both
// selection paths), frames round-trip, and bad values and bad frames are clear errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <sluice/config.hpp>
#if SLUICE_HAS_OPENMP
#include <omp.h>
#endif

#include <sluice/compress/top_k.hpp>

#include "compress/codec_testing.hpp"
#include "support/compress_reference.hpp"

namespace {

using sluice::top_k;
using namespace sluice::test;

template <class T>
std::vector<std::uint32_t> select(std::vector<T> const& x, std::size_t k, bool radix = false) {
  sluice::detail::compress::select_workspace<T> ws;
  ws.force_radix = radix;
  std::vector<std::uint32_t> idx(k);
  std::vector<T> val(k);
  sluice::detail::compress::select_top_k<T, std::uint32_t>(x, k, ws, std::span(idx), std::span(val));
  for (std::size_t j = 0; j < k; ++j) {
    bool const same = std::bit_cast<std::uint32_t>(static_cast<float>(val[j])) ==
                      std::bit_cast<std::uint32_t>(static_cast<float>(x[idx[j]]));
    REQUIRE(same);
  }
  return idx;
}

template <class T>
void check_against_reference(std::vector<T> const& x, std::size_t k) {
  auto const ref = reference_top_k(x, k);
  CHECK(select(x, k, false) == ref);
  CHECK(select(x, k, true) == ref);
}

}  // namespace

TEST_CASE_TEMPLATE("top_k selection equals the nth_element reference", T, float, sluice::half, sluice::bfloat16) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{17}, std::size_t{1000},
                        std::size_t{40000}, std::size_t{1} << 18}) {
    auto const x = gaussian<T>(n, static_cast<unsigned>(n));
    for (double r : {1e-4, 1e-3, 0.01, 0.1, 0.5, 1.0}) {
      CAPTURE(n);
      CAPTURE(r);
      check_against_reference(x, sluice::detail::compress::keep_count(r, n));
    }
    check_against_reference(x, 0);
    check_against_reference(x, n);
  }
}

TEST_CASE_TEMPLATE("top_k ties go to the lower index", T, float, sluice::half, sluice::bfloat16) {
  // Few distinct magnitudes with both signs: every threshold is a tie.
  std::size_t const n = std::size_t{1} << 17;
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = T(static_cast<float>(static_cast<int>((i * 7919) % 9) - 4));
  for (std::size_t k : {std::size_t{1}, std::size_t{100}, std::size_t{1311}, n / 3, n - 1})
    check_against_reference(x, k);
  std::vector<T> same(n, T(1.5f));
  for (std::size_t k : {std::size_t{1}, std::size_t{5000}, n - 1}) check_against_reference(same, k);
  std::vector<T> zeros(n, T(0.0f));
  zeros[n - 1] = T(-0.0f);
  check_against_reference(zeros, 10);
}

TEST_CASE_TEMPLATE("top_k ranks NaN above infinity and keeps both", T, float, sluice::half, sluice::bfloat16) {
  auto x = gaussian<T>(std::size_t{1} << 16, 3);
  float const inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  x[5] = T(nan);
  x[70] = T(-inf);
  x[900] = T(inf);
  x[60000] = T(-nan);
  auto const idx = select(x, 3);
  CHECK(idx == std::vector<std::uint32_t>{5, 70, 60000});  // two NaNs, then the lower-index Inf
  check_against_reference(x, 3);
  check_against_reference(x, 1000);
}

TEST_CASE("top_k selection on skewed data (all large values in one chunk) matches the reference") {
  std::size_t const n = std::size_t{1} << 20;
  auto x = gaussian<float>(n, 9);
  for (std::size_t i = n - n / 64; i < n; ++i) x[i] *= 1000.0f;
  for (double r : {0.001, 0.01, 0.05}) check_against_reference(x, sluice::detail::compress::keep_count(r, n));
}

TEST_CASE_TEMPLATE("top_k selection: every sample bracket shape matches the reference", T, float, sluice::half,
                   sluice::bfloat16) {
  // k from a few sample ranks (band from 0; band capped by the sample's largest at k = 1500) to
  // many (band between two sample ranks, most kept elements above it), on dense groups of hits (a
  // filter group holding more hits than its fixed steps) and on data whose largest values avoid
  // the sample (more than k above the band: the radix path decides).
  std::size_t const n = std::size_t{1} << 18;
  auto const x = gaussian<T>(n, 21);
  for (std::size_t k : {std::size_t{40}, std::size_t{300}, std::size_t{640}, std::size_t{1500}, std::size_t{5000},
                        std::size_t{30000}}) {
    CAPTURE(k);
    check_against_reference(x, k);
  }
  auto clustered = x;
  for (std::size_t i = 1000; i < 3000; ++i) clustered[i] = T(static_cast<float>(clustered[i]) * 50.0f);
  for (std::size_t k : {std::size_t{640}, std::size_t{2500}}) check_against_reference(clustered, k);
  auto hidden = x;
  for (std::size_t i = 0; i < n; ++i)
    if (i % 8 == 3) hidden[i] = T(static_cast<float>(hidden[i]) * 100.0f);  // never a sampled position (step/2 even)
  for (std::size_t k : {std::size_t{1500}, std::size_t{3000}}) check_against_reference(hidden, k);
}

TEST_CASE("top_k frames are the same bytes on every SIMD level and thread count") {
  // The digest below was taken with SLUICE_SIMD=baseline; ctest runs this binary on the baseline,
  // AVX2 and default (AVX-512 where the CPU has it) bodies. Inputs come from splitmix64, not from
  // <random>, so the digest does not depend on the standard library.
  auto frames_digest = [] {
    std::uint64_t digest = 0xcbf29ce484222325u, state = 7;
    auto next = [&state] {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15u);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
      return z ^ (z >> 31);
    };
    for (std::size_t n : {std::size_t{1000}, std::size_t{40000}, std::size_t{1} << 18, (std::size_t{1} << 20) + 37}) {
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) {
        // Gradient-like: a scale that changes every 4096 elements, a few exact ties and zeros.
        auto const u = next();
        float const scale = static_cast<float>(1 + (i >> 12) % 7);
        x[i] = (u & 0xff) == 0 ? 0.25f : scale * (static_cast<float>(u >> 40) / 16777216.0f - 0.5f);
      }
      for (double r : {0.001, 0.01, 0.1}) {
        top_k const c{.ratio = r};
        top_k::workspace<float> ws;
        std::vector<std::byte> out(c.max_encoded_bytes(n));
        std::size_t const bytes = c.encode(std::span<float const>(x), {}, ws, std::span(out));
        for (std::size_t b = 0; b < bytes; ++b) digest = (digest ^ static_cast<std::uint8_t>(out[b])) * 0x100000001b3u;
      }
    }
    return digest;
  };
  std::uint64_t const expect = 0x571e60671debff43u;
#if SLUICE_HAS_OPENMP
  int const threads = omp_get_max_threads();
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    CAPTURE(t);
    CHECK(frames_digest() == expect);
  }
  omp_set_num_threads(threads);
#else
  CHECK(frames_digest() == expect);
#endif
}

TEST_CASE("keep_count is ceil(ratio * n) without representation artefacts") {
  using sluice::detail::compress::keep_count;
  CHECK(keep_count(0.01, 100) == 1);
  CHECK(keep_count(0.01, 101) == 2);
  CHECK(keep_count(0.1, 30) == 3);
  CHECK(keep_count(1e-9, 10) == 1);
  CHECK(keep_count(1.0, 7) == 7);
  CHECK(keep_count(0.5, 0) == 0);
  CHECK(keep_count(0.3, 10) == 3);
}

TEST_CASE_TEMPLATE("top_k round trip: dense, add-into and sparse", T, float, sluice::half, sluice::bfloat16) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{999}, std::size_t{1} << 16}) {
    top_k const c{.ratio = 0.05};
    auto const x = gaussian<T>(n, 1);
    top_k::workspace<T> ws;
    sluice::encode_context const ctx{.step = 3, .tensor = 4};
    auto const msg = encode(c, x, ws, ctx);
    auto const y = decode<T>(c, msg, n, ws, ctx);
    auto const ref = reference_top_k(x, c.keep(n));
    std::vector<T> expect(n, T(0.0f));
    for (auto i : ref) expect[i] = x[i];
    CHECK(y == expect);

    std::vector<T> acc(n, T(1.0f));
    sluice::decode_add(c, std::span<std::byte const>(msg), ctx, ws, std::span<T>(acc));
    for (std::size_t i = 0; i < n; ++i)
      CHECK(static_cast<float>(acc[i]) == static_cast<float>(T(1.0f + static_cast<float>(expect[i]))));

    sluice::sparse_buffer<T> sb;
    c.decode_sparse(std::span<std::byte const>(msg), ctx, ws, sb);
    CHECK(sb.extent() == n);
    CHECK(std::vector<std::uint32_t>(sb.indices().begin(), sb.indices().end()) == ref);
    sb.view().validate();
    auto const h = sluice::wire::parse(msg);
    CHECK(h.head.step == 3);
    CHECK(h.head.tensor == 4);
  }
}

TEST_CASE_TEMPLATE("top_k rejects bad ratios before writing and bad frames when decoding", T, float, sluice::half,
                   sluice::bfloat16) {
  auto const x = gaussian<T>(4096, 2);
  top_k::workspace<T> ws;
  for (double r : {0.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    std::vector<std::byte> out(100000, std::byte{0x5a});
    expect_errc([&] { (void)top_k{.ratio = r}.encode(std::span<T const>(x), {}, ws, std::span<std::byte>(out)); },
                sluice::errc::invalid_argument);
    CHECK(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0x5a}; }));
  }
  std::vector<std::byte> small(200);
  expect_errc([&] { (void)top_k{}.encode(std::span<T const>(x), {}, ws, std::span<std::byte>(small)); },
              sluice::errc::size_mismatch);
  auto const msg = encode(top_k{.ratio = 0.02}, x, ws);
  check_malformed<top_k, T>(top_k{.ratio = 0.02}, msg, x.size());
}

TEST_CASE("top_k is a regular, printable value") {
  top_k const a{.ratio = 0.25};
  CHECK(a == top_k{.ratio = 0.25});
  CHECK(a != top_k{});
  CHECK(fmt::format("{}", a) == "top_k{.ratio = 0.25}");
}
