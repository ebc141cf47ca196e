// Delta + LEB128 index lists: exact round trip, tight bound, and every malformed list rejected.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include <sluice/core/varint.hpp>

namespace wire = sluice::wire;

namespace {
std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int x : v) out.push_back(static_cast<std::byte>(x));
  return out;
}
void expect_malformed(std::vector<std::byte> const& in, std::size_t count, std::size_t extent, char const* needle) {
  std::vector<std::uint32_t> out(count);
  try {
    wire::decode_sorted_indices<std::uint32_t>(in, extent, out);
    FAIL("accepted; expected " << needle);
  } catch (sluice::error const& e) {
    CHECK(e.code() == sluice::errc::malformed_message);
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}
}  // namespace

TEST_CASE_TEMPLATE("sorted indices round trip within max_index_bytes", Index, std::uint32_t, std::uint64_t) {
  std::mt19937_64 rng(5);
  for (std::size_t extent : {std::size_t{1}, std::size_t{100}, std::size_t{1} << 20, std::size_t{1} << 31}) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{1000}}) {
      if (count > extent) continue;
      std::vector<Index> idx;
      while (idx.size() < count) {
        idx.push_back(static_cast<Index>(rng() % extent));
        std::sort(idx.begin(), idx.end());
        idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
      }
      std::vector<std::byte> buf(wire::max_index_bytes(count, extent));
      std::size_t const n = wire::encode_sorted_indices<Index>(idx, buf);
      CHECK(n <= buf.size());
      std::vector<Index> back(count);
      wire::decode_sorted_indices<Index>(std::span<std::byte const>(buf.data(), n), extent, back);
      CHECK(back == idx);
    }
  }
  // The last index of a 2^32 extent takes 5 bytes.
  CHECK(wire::varint_size(0xffffffffu) == 5);
  CHECK(wire::max_index_bytes(3, std::size_t{1} << 32) == 15);
}

TEST_CASE("encoding refuses unsorted input and short buffers") {
  std::vector<std::uint32_t> idx{5, 3};
  std::vector<std::byte> buf(16);
  CHECK_THROWS_AS(wire::encode_sorted_indices<std::uint32_t>(idx, buf), sluice::error);
  std::vector<std::uint32_t> big{1u << 30};
  std::vector<std::byte> tiny(2);
  CHECK_THROWS_AS(wire::encode_sorted_indices<std::uint32_t>(big, tiny), sluice::error);
}

TEST_CASE("malformed index lists are rejected with a reason") {
  expect_malformed(bytes({0x85}), 1, 100, "truncated");      // continuation, no end
  expect_malformed(bytes({5}), 2, 100, "truncated");         // too few indices
  expect_malformed(bytes({5, 0}), 2, 100, "duplicate");      // gap 0
  expect_malformed(bytes({5, 1, 7}), 2, 100, "trailing");    // extra bytes
  expect_malformed(bytes({99, 1}), 2, 100, "out of range");  // 100 >= extent
  expect_malformed(bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}), 1, 100,
                   "longer than");  // 11-byte varint
  expect_malformed(bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), 1, 100, "overflows");
  // Gap that wraps the running index around 2^64 (unsorted after wrap).
  expect_malformed(bytes({10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), 2, std::size_t{1} << 40,
                   "out of range");
}

TEST_CASE("fixed-width index lists from peers are checked") {
  std::vector<std::uint32_t> ok{0, 3, 9};
  CHECK_NOTHROW(wire::check_sorted_indices<std::uint32_t>(ok, 10));
  std::vector<std::uint32_t> unsorted{0, 9, 3};
  CHECK_THROWS_WITH_AS(wire::check_sorted_indices<std::uint32_t>(unsorted, 10),
                       doctest::Contains("unsorted or duplicate"), sluice::error);
  std::vector<std::uint32_t> dup{1, 1};
  CHECK_THROWS_AS(wire::check_sorted_indices<std::uint32_t>(dup, 10), sluice::error);
  std::vector<std::uint32_t> oob{1, 10};
  CHECK_THROWS_WITH_AS(wire::check_sorted_indices<std::uint32_t>(oob, 10), doctest::Contains("out of range"),
                       sluice::error);
}
