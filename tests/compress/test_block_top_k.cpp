// block_top_k: exactly the top blocks of the whole tensor (reference check, tail included, n not a
// multiple of B), round trips to dense and to a block sparse_view, bad values and frames rejected.
#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include <sluice/compress/block_top_k.hpp>

#include "compress/codec_testing.hpp"
#include "support/compress_reference.hpp"

namespace {

using sluice::block_score;
using sluice::block_top_k;
using namespace sluice::test;

template <class T>
std::vector<std::uint32_t> selected(block_top_k const& c, std::vector<T> const& x) {
  block_top_k::workspace<T> ws;
  c.select(std::span<T const>(x), ws);
  return {ws.indices.begin(), ws.indices.begin() + static_cast<std::ptrdiff_t>(c.keep_blocks(x.size()))};
}

}  // namespace

TEST_CASE_TEMPLATE("block_top_k picks exactly the top blocks", T, float, sluice::half, sluice::bfloat16) {
  for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{1000}, std::size_t{100003},
                        (std::size_t{1} << 18) + 5}) {
    auto const x = gaussian<T>(n, static_cast<unsigned>(n + 1));
    for (std::size_t B : {std::size_t{1}, std::size_t{3}, std::size_t{16}, std::size_t{64}})
      for (auto s : {block_score::l1, block_score::l2})
        for (double r : {0.001, 0.01, 0.2, 1.0}) {
          block_top_k const c{.ratio = r, .block = B, .score = s};
          CAPTURE(n);
          CAPTURE(B);
          CAPTURE(r);
          std::size_t const k = sluice::detail::compress::keep_count(r, n);
          std::size_t const b = std::min((k + B - 1) / B, (n + B - 1) / B);
          CHECK(c.keep_blocks(n) == b);
          CHECK(selected(c, x) == reference_block_top_k(x, B, b, s == block_score::l2));
        }
  }
}

TEST_CASE("block_top_k looks at the tail: the best blocks at the very end are found") {
  std::size_t const n = (std::size_t{1} << 20) + 7;  // partial last block of 7 elements
  auto x = gaussian<float>(n, 5, 1e-3f);
  x[n - 1] = 50.0f;           // the partial last block
  x[n - 7 - 16 + 3] = 40.0f;  // the last full block
  block_top_k const c{.ratio = 0.0001};
  auto const idx = selected(c, x);
  std::size_t const last = (n + 15) / 16 - 1;
  CHECK(std::find(idx.begin(), idx.end(), static_cast<std::uint32_t>(last)) != idx.end());
  CHECK(std::find(idx.begin(), idx.end(), static_cast<std::uint32_t>(last - 1)) != idx.end());
  CHECK(idx == reference_block_top_k(x, 16, c.keep_blocks(n), false));
}

TEST_CASE("block_top_k ties go to the lower block") {
  std::vector<float> x(1600, 1.0f);
  block_top_k const c{.ratio = 0.05};  // 80 elements = 5 blocks out of 100 equal ones
  CHECK(selected(c, x) == std::vector<std::uint32_t>{0, 1, 2, 3, 4});
}

TEST_CASE_TEMPLATE("block_top_k round trip: dense, add-into and block sparse", T, float, sluice::half,
                   sluice::bfloat16) {
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{1000}, std::size_t{65537}}) {
    block_top_k const c{.ratio = 0.03, .block = 16, .score = block_score::l2};
    auto const x = gaussian<T>(n, 11);
    block_top_k::workspace<T> ws;
    auto const msg = encode(c, x, ws);
    auto const y = decode<T>(c, msg, n, ws);
    auto const ref = reference_block_top_k(x, 16, c.keep_blocks(n), true);
    std::vector<T> expect(n, T(0.0f));
    for (auto b : ref)
      for (std::size_t e = std::size_t{b} * 16; e < std::min(n, std::size_t{b} * 16 + 16); ++e) expect[e] = x[e];
    CHECK(y == expect);

    std::vector<T> acc(x);
    sluice::decode_add(c, std::span<std::byte const>(msg), {}, ws, std::span<T>(acc));
    for (std::size_t i = 0; i < n; ++i)
      if (static_cast<float>(acc[i]) != static_cast<float>(T(static_cast<float>(x[i]) + static_cast<float>(expect[i]))))
        FAIL("decode_add mismatch at " << i);

    sluice::sparse_buffer<T> sb;
    c.decode_sparse(std::span<std::byte const>(msg), {}, ws, sb);
    CHECK(sb.block_size() == 16);
    CHECK(sb.extent() == n);
    sb.view().validate();
    std::vector<T> z(n, T(0.0f));
    sluice::scatter<T, std::uint32_t, T>(sb.view(), std::span<T>(z), false);
    CHECK(z == expect);
  }
}

TEST_CASE_TEMPLATE("block_top_k rejects bad values before writing and bad frames", T, float, sluice::half,
                   sluice::bfloat16) {
  auto const x = gaussian<T>(5000, 2);
  block_top_k::workspace<T> ws;
  for (auto bad : {block_top_k{.ratio = 0.0}, block_top_k{.ratio = 2.0}, block_top_k{.block = 0},
                   block_top_k{.block = 100000}, block_top_k{.score = static_cast<block_score>(7)}}) {
    std::vector<std::byte> out(100000, std::byte{0x5a});
    expect_errc([&] { (void)bad.encode(std::span<T const>(x), {}, ws, std::span<std::byte>(out)); },
                sluice::errc::invalid_argument);
    CHECK(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0x5a}; }));
  }
  block_top_k const c{.ratio = 0.05, .block = 8};
  auto const msg = encode(c, x, ws);
  check_malformed<block_top_k, T>(c, msg, x.size());
  // A decoder with another block size refuses the frame.
  std::vector<T> y(x.size());
  expect_errc(
      [&] { sluice::decode(block_top_k{.ratio = 0.05}, std::span<std::byte const>(msg), {}, ws, std::span<T>(y)); },
      sluice::errc::malformed_message);
}

TEST_CASE("block_top_k prints") {
  CHECK(fmt::format("{}", block_top_k{}) == "block_top_k{.ratio = 0.01, .block = 16, .score = l1}");
  CHECK(block_top_k{} == block_top_k{.ratio = 0.01});
}
