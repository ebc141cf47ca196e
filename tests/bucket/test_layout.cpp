// layout: construction rules, stable fingerprint, canonical serialization from untrusted bytes,
// and the cross-rank comparison that names the first differing tensor and both ranks.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include <sluice/bucket/layout.hpp>

namespace {

sluice::layout small_model() {
  sluice::layout l;
  l.add("conv1.weight", {16, 3, 3, 3}).add("conv1.bias", {16}).add("fc.weight", {10, 256}, sluice::element_type::bf16);
  return l;
}

std::string what_of(auto&& f) {
  try {
    f();
  } catch (sluice::error const& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("layout: add validates names and counts elements") {
  auto l = small_model();
  CHECK(l.size() == 3);
  CHECK(l[0].elements() == 16 * 27);
  CHECK(l[2].bytes() == 2560 * 2);
  CHECK(l.total_elements() == 432 + 16 + 2560);
  CHECK(l.find("fc.weight") == 2);
  CHECK(l.find("nope") == 3);
  CHECK_THROWS_AS(l.add("conv1.bias", {3}), sluice::error);
  CHECK_THROWS_AS(l.add("", {3}), sluice::error);
  CHECK(l.size() == 3);
  sluice::layout s;
  s.add("scalar", {});
  CHECK(s[0].elements() == 1);
}

TEST_CASE("layout: from (name, span) pairs") {
  std::vector<float> a(100);
  std::vector<sluice::bfloat16> b(7);
  std::vector<std::pair<std::string, std::span<float const>>> named{{"a", a}};
  auto l = sluice::layout::from(named);
  CHECK(l.size() == 1);
  CHECK(l[0].shape == std::vector<std::size_t>{100});
  std::vector<std::pair<char const*, std::span<sluice::bfloat16>>> named_b{{"b", b}};
  auto lb = sluice::layout::from(named_b);
  CHECK(lb[0].element == sluice::element_type::bf16);
}

TEST_CASE("layout: fingerprint is stable and sensitive") {
  auto const a = small_model(), b = small_model();
  CHECK(a.fingerprint() == b.fingerprint());
  // Pinned: the fingerprint must not change between builds, compilers or runs.
  sluice::layout one;
  one.add("w", {2, 3});
  CHECK(one.fingerprint() == sluice::layout::deserialize(one.serialize()).fingerprint());
  sluice::layout renamed, reshaped, retyped;
  renamed.add("x", {2, 3});
  reshaped.add("w", {3, 2});
  retyped.add("w", {2, 3}, sluice::element_type::f16);
  CHECK(one.fingerprint() != renamed.fingerprint());
  CHECK(one.fingerprint() != reshaped.fingerprint());
  CHECK(one.fingerprint() != retyped.fingerprint());
}

TEST_CASE("layout: serialize round trip; deserialize refuses bad bytes") {
  auto const l = small_model();
  auto bytes = l.serialize();
  CHECK(sluice::layout::deserialize(bytes) == l);
  // Every truncation is malformed, never a crash.
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    try {
      (void)sluice::layout::deserialize(std::span<std::byte const>(bytes.data(), n));
      FAIL("truncated layout accepted at ", n);
    } catch (sluice::error const& e) {
      CHECK(e.kind() == sluice::errc::malformed_message);
    }
  }
  auto extra = bytes;
  extra.push_back(std::byte{0});
  CHECK_THROWS_AS((void)sluice::layout::deserialize(extra), sluice::error);
  auto bad_type = bytes;
  bad_type[16 + 4] = std::byte{9};  // first tensor's element type
  CHECK_THROWS_AS((void)sluice::layout::deserialize(bad_type), sluice::error);
  auto huge_count = bytes;
  huge_count[15] = std::byte{0x7f};
  CHECK_THROWS_AS((void)sluice::layout::deserialize(huge_count), sluice::error);
}

TEST_CASE("layouts_must_match names the first differing tensor and both ranks") {
  auto const a = small_model();
  sluice::layouts_must_match(a.serialize(), 0, a.serialize(), 3);
  sluice::layout b;
  b.add("conv1.weight", {16, 3, 3, 3}).add("conv1.bias", {32}).add("fc.weight", {10, 256});
  auto const msg = what_of([&] { sluice::layouts_must_match(a.serialize(), 0, b.serialize(), 5); });
  CHECK(msg.find("tensor #1") != std::string::npos);
  CHECK(msg.find("conv1.bias") != std::string::npos);
  CHECK(msg.find("rank 0") != std::string::npos);
  CHECK(msg.find("rank 5") != std::string::npos);
  try {
    sluice::layouts_must_match(a.serialize(), 0, b.serialize(), 5);
  } catch (sluice::error const& e) {
    CHECK(e.kind() == sluice::errc::size_mismatch);
  }
  sluice::layout shorter;
  shorter.add("conv1.weight", {16, 3, 3, 3});
  auto const msg2 = what_of([&] { sluice::layouts_must_match(shorter.serialize(), 2, a.serialize(), 7); });
  CHECK(msg2.find("conv1.bias") != std::string::npos);
  CHECK(msg2.find("rank 7") != std::string::npos);
  std::vector<std::byte> garbage(5, std::byte{1});
  auto const msg3 = what_of([&] { sluice::layouts_must_match(a.serialize(), 0, garbage, 4); });
  CHECK(msg3.find("rank 4") != std::string::npos);
}
