// Delta + LEB128 index lists: exact round trip, tight bound, and every malformed list rejected.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include <sluice/core/varint.hpp>

#include "core/varint_reference.hpp"

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

namespace {
std::vector<std::byte> encode_list(std::vector<std::uint64_t> const& idx) {
  std::vector<std::byte> buf(wire::max_index_bytes(idx.size(), std::size_t{0} - 1));
  buf.resize(wire::encode_sorted_indices<std::uint64_t>(idx, buf));
  return buf;
}
template <class Index>
bool agree(std::vector<std::byte> const& in, std::size_t extent, std::size_t count) {
  return sluice::test::decoders_agree<Index>(in, extent, count);
}
}  // namespace

TEST_CASE("the word paths decode gaps at every varint length edge, anywhere near the end") {
  // Gaps of 2^k - 1, 2^k and 2^k + 1 for every 7-bit boundary (varints of 1 to 10 bytes), at
  // every position of a list of 1- and 2-byte gaps: each long varint starts in every one of the
  // last 8 bytes, straddles them, and ends before them.
  for (unsigned k = 7; k <= 63; k += 7) {
    for (std::uint64_t d : {std::uint64_t{0} - 1, std::uint64_t{0}, std::uint64_t{1}}) {
      std::uint64_t const big = (std::uint64_t{1} << k) + d;
      for (std::size_t at = 0; at < 24; ++at) {
        std::vector<std::uint64_t> idx;
        std::uint64_t v = 3;
        for (std::size_t j = 0; j < 24; ++j) {
          v += j == at ? big : 1 + (j * 37) % 200;
          idx.push_back(v);
        }
        auto const buf = encode_list(idx);
        CAPTURE(k);
        CAPTURE(at);
        std::vector<std::uint64_t> back(idx.size());
        wire::decode_sorted_indices<std::uint64_t>(buf, idx.back() + 1, back);
        CHECK(back == idx);
        CHECK(agree<std::uint64_t>(buf, idx.back() + 1, idx.size()));
        CHECK(agree<std::uint64_t>(buf, idx.back(), idx.size()));                  // last out of range
        CHECK(agree<std::uint64_t>(buf, idx[at] == 0 ? 1 : idx[at], idx.size()));  // out of range at `at`
        CHECK(agree<std::uint64_t>(buf, idx.back() + 1, idx.size() + 1));          // truncated
        CHECK(agree<std::uint64_t>(buf, idx.back() + 1, idx.size() - 1));          // trailing bytes
        for (std::size_t cut = 1; cut <= 11 && cut < buf.size(); ++cut)
          CHECK(agree<std::uint64_t>(std::vector<std::byte>(buf.begin(), buf.end() - static_cast<std::ptrdiff_t>(cut)),
                                     idx.back() + 1, idx.size()));
        if (idx.back() < (std::uint64_t{1} << 32)) {
          std::vector<std::uint32_t> back32(idx.size());
          wire::decode_sorted_indices<std::uint32_t>(buf, idx.back() + 1, back32);
          CHECK(std::equal(back32.begin(), back32.end(), idx.begin()));
        }
      }
    }
  }
}

TEST_CASE("the word paths raise every error at the same index and byte as the byte loop") {
  // A duplicate (a zero gap), an over-long and an overflowing varint at every position of a list
  // of short gaps, so that each falls inside a four-varint word, a one-varint word or the tail.
  std::vector<std::uint64_t> idx;
  for (std::uint64_t j = 0, v = 0; j < 40; ++j) idx.push_back(v += 1 + (j * 53) % 300);
  auto const buf = encode_list(idx);
  std::size_t const extent = idx.back() + 1;
  for (std::size_t at = 0; at < idx.size(); ++at) {
    CAPTURE(at);
    // The byte offset where varint `at` starts.
    std::size_t start = 0;
    for (std::size_t j = 0; j < at; ++j) start += wire::varint_size(j == 0 ? idx[0] : idx[j] - idx[j - 1]);
    std::size_t const len = wire::varint_size(at == 0 ? idx[0] : idx[at] - idx[at - 1]);
    auto splice = [&](std::vector<int> const& bytes) {
      std::vector<std::byte> out(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(start));
      for (int b : bytes) out.push_back(static_cast<std::byte>(b));
      out.insert(out.end(), buf.begin() + static_cast<std::ptrdiff_t>(start + len), buf.end());
      return out;
    };
    CHECK(agree<std::uint32_t>(splice({0}), extent, idx.size()));           // duplicate (unless at == 0)
    CHECK(agree<std::uint32_t>(splice({0x80, 0x00}), extent, idx.size()));  // zero gap in 2 bytes
    CHECK(agree<std::uint32_t>(splice({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}), extent,
                               idx.size()));  // 11 bytes
    CHECK(agree<std::uint32_t>(splice({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), extent,
                               idx.size()));  // overflow
    CHECK(agree<std::uint64_t>(splice({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), std::size_t{0} - 1,
                               idx.size()));                                // wraps past 2^64
    CHECK(agree<std::uint32_t>(splice({0xff, 0x7f}), extent, idx.size()));  // out of range from here
    CHECK(agree<std::uint32_t>(splice({0x85}), extent, idx.size()));        // runs into the next varint
  }
}

TEST_CASE("the word paths agree with the byte loop on random bytes") {
  std::mt19937_64 rng(11);
  for (int t = 0; t < 20000; ++t) {
    std::size_t const size = rng() % 48;
    std::vector<std::byte> in(size);
    // Mostly short varints (bit 7 set in a quarter of the bytes), sometimes long runs.
    bool const runs = rng() % 4 == 0;
    for (auto& b : in) {
      auto const r = rng();
      auto const low = static_cast<std::uint8_t>(r & 0x7f);
      bool const more = runs ? (r >> 8) % 8 != 0 : (r >> 8) % 4 == 0;
      b = static_cast<std::byte>(low | (more ? 0x80 : 0));
    }
    std::size_t const count = rng() % 40;
    std::size_t const extent = rng() % 3 == 0 ? std::size_t{0} - 1 : rng() % 20000;
    CAPTURE(t);
    CHECK(agree<std::uint64_t>(in, extent, count));
    CHECK(agree<std::uint32_t>(in, extent, count));
  }
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
