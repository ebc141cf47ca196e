// The shared persistence format (core/serial.hpp) and numbers from the wire that size things:
// 32-bit index lists past 2^32, layouts whose byte counts overflow.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <sluice/bucket/layout.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/core/varint.hpp>

using namespace sluice;

namespace {
errc kind_of(auto&& f) {
  try {
    f();
  } catch (error const& e) {
    return e.kind();
  }
  return errc{};
}
}  // namespace

TEST_CASE("a record is versioned and checksummed; every damaged byte is errc::malformed_message") {
  std::vector<std::byte> rec;
  serial::start_record(rec, 0x54534554u, 3);
  serial::put<std::uint64_t>(rec, 42);
  serial::seal(rec);
  REQUIRE(rec.size() == serial::record_overhead + 8);
  auto r = serial::open_record(rec, 0x54534554u, 3, "test state");
  std::uint64_t v = 0;
  CHECK(r.get(v));
  CHECK(v == 42);
  CHECK(r.left() == 0);
  for (std::size_t i = 0; i < rec.size(); ++i) {
    auto bad = rec;
    bad[i] ^= std::byte{0x40};
    CHECK(kind_of([&] { (void)serial::open_record(bad, 0x54534554u, 3, "test state"); }) == errc::malformed_message);
  }
  for (std::size_t cut = 0; cut < rec.size(); ++cut)
    CHECK(kind_of([&] { (void)serial::open_record(std::span(rec).first(cut), 0x54534554u, 3, "t"); }) ==
          errc::malformed_message);
  CHECK(kind_of([&] { (void)serial::open_record(rec, 0x54534554u, 4, "t"); }) == errc::malformed_message);
  CHECK(kind_of([&] { (void)serial::open_record(rec, 0x11111111u, 3, "t"); }) == errc::malformed_message);
}

TEST_CASE("32-bit index lists refuse indices of 2^32 and more instead of truncating them") {
  // One index, 2^32 + 5, in a list whose extent claims 2^33 elements.
  std::uint64_t const big = (std::uint64_t{1} << 32) + 5;
  std::vector<std::uint64_t> const one = {big};
  std::vector<std::byte> bytes(wire::max_index_bytes(1, std::size_t{1} << 33));
  bytes.resize(wire::encode_sorted_indices<std::uint64_t>(std::span<std::uint64_t const>(one), bytes));
  std::vector<std::uint32_t> out32(1);
  CHECK(kind_of([&] {
          wire::decode_sorted_indices<std::uint32_t>(bytes, std::size_t{1} << 33, std::span<std::uint32_t>(out32));
        }) == errc::malformed_message);
  std::vector<std::uint64_t> out64(1);
  wire::decode_sorted_indices<std::uint64_t>(bytes, std::size_t{1} << 33, std::span<std::uint64_t>(out64));
  CHECK(out64[0] == big);
  // 2^32 - 1 itself is the largest 32-bit index.
  std::vector<std::uint64_t> const top = {0xFFFFFFFFu};
  bytes.assign(16, std::byte{0});
  bytes.resize(wire::encode_sorted_indices<std::uint64_t>(std::span<std::uint64_t const>(top), bytes));
  wire::decode_sorted_indices<std::uint32_t>(bytes, std::size_t{1} << 33, std::span<std::uint32_t>(out32));
  CHECK(out32[0] == 0xFFFFFFFFu);
}

TEST_CASE("a layout whose byte counts would overflow is refused, from add() and from a peer") {
  layout l;
  CHECK(kind_of([&] { l.add("w", {std::size_t{1} << 62, 1}); }) == errc::invalid_argument);  // 2^64 bytes
  l.add("a", {std::size_t{1} << 62}, element_type::f16);                                     // 2^63 bytes
  CHECK(kind_of([&] { l.add("b", {std::size_t{1} << 62}, element_type::f16); }) == errc::invalid_argument);
  CHECK(l.size() == 1);
  CHECK(l.total_elements() == std::size_t{1} << 62);
  // The same shapes received from a peer.
  layout two;
  two.add("a", {1}, element_type::f16).add("b", {1}, element_type::f16);
  auto bytes = two.serialize();
  // Offsets: 16-byte header; tensor: u32 name, u8 type, u8 dims, u16 0, dims x u64, name.
  std::uint64_t const huge = std::uint64_t{1} << 62;
  std::memcpy(bytes.data() + 16 + 8, &huge, 8);
  CHECK(layout::deserialize(bytes).total_elements() == huge + 1);
  std::memcpy(bytes.data() + 16 + 8 + 8 + 1 + 8, &huge, 8);
  CHECK(kind_of([&] { (void)layout::deserialize(bytes); }) == errc::malformed_message);
}
