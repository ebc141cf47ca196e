// Wire frames: round trip, and every way a peer can lie is a clear errc::malformed_message.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <sluice/core/wire.hpp>

namespace wire = sluice::wire;

namespace {

std::vector<std::byte> make_frame(std::vector<std::vector<std::byte>> const& sections, wire::header const& h) {
  std::vector<std::size_t> lens;
  for (auto const& s : sections) lens.push_back(s.size());
  std::vector<std::byte> out(wire::frame_bytes(lens));
  wire::writer w(out, h);
  for (auto const& s : sections) w.write(s);
  std::size_t const n = w.finish();
  REQUIRE(n == out.size());
  return out;
}

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int x : v) out.push_back(static_cast<std::byte>(x));
  return out;
}

template <class U>
void poke(std::vector<std::byte>& f, std::size_t off, U v) {
  std::memcpy(f.data() + off, &v, sizeof v);
}

// Recomputes the checksum so a test can reach validation steps that come after it.
void reseal(std::vector<std::byte>& f) { poke<std::uint64_t>(f, 72, sluice::detail::wire::frame_checksum(f)); }

void expect_malformed(std::span<std::byte const> f, char const* needle, wire::expectation const& e = {}) {
  try {
    (void)wire::parse(f, e);
    FAIL("parse accepted a malformed frame; expected: " << needle);
  } catch (sluice::error const& err) {
    CHECK(err.code() == sluice::errc::malformed_message);
    CHECK_MESSAGE(std::string(err.what()).find(needle) != std::string::npos, err.what());
  }
}

wire::header const h{.codec = wire::codec_id::top_k,
                     .element = sluice::element_type::f16,
                     .flags = 3,
                     .tensor = 12,
                     .step = 99,
                     .extent = 1000};

}  // namespace

TEST_CASE("frames round trip with padding and checksum") {
  auto const f = make_frame({bytes({1, 2, 3}), bytes({}), bytes({9, 8, 7, 6, 5, 4, 3, 2, 1})}, h);
  CHECK(f.size() == 80 + 8 + 0 + 16);
  auto const p =
      wire::parse(f, {.codec = wire::codec_id::top_k, .tensor = 12, .step = 99, .extent = 1000, .sections = 3});
  CHECK(p.head == h);
  CHECK(p.section_count == 3);
  CHECK(p.section(0).size() == 3);
  CHECK(p.section(1).empty());
  CHECK(p.section(2)[8] == std::byte{1});
  CHECK_THROWS_AS((void)p.section(3), sluice::error);
  // Sections are 8-byte aligned relative to the frame start.
  CHECK((p.section(2).data() - f.data()) % 8 == 0);
}

TEST_CASE("a frame truncated at every byte offset is rejected") {
  auto const f = make_frame({bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), bytes({42})}, h);
  for (std::size_t n = 0; n < f.size(); ++n) {
    std::span<std::byte const> const cut(f.data(), n);
    CHECK_THROWS_AS((void)wire::parse(cut), sluice::error);
  }
  // And extended by a byte.
  auto longer = f;
  longer.push_back(std::byte{0});
  expect_malformed(longer, "");
}

TEST_CASE("every corrupted byte is detected") {
  auto const f = make_frame({bytes({1, 2, 3, 4, 5}), bytes({6, 7})}, h);
  for (std::size_t i = 0; i < f.size(); ++i) {
    for (int bit : {0, 7}) {
      auto g = f;
      g[i] ^= static_cast<std::byte>(1 << bit);
      CHECK_THROWS_AS((void)wire::parse(g), sluice::error);
    }
  }
}

TEST_CASE("large payloads: block-wise checksum catches corruption anywhere and swapped blocks") {
  // 3 MiB of payload: past the single-pass limit, so the checksum is over per-block digests.
  std::vector<std::byte> big(std::size_t{3} << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  auto const f = make_frame({big}, h);
  CHECK(wire::parse(f).section(0).size() == big.size());
  // The same value whatever the thread count computing it.
  std::uint64_t sum = 0;
  std::memcpy(&sum, f.data() + 72, 8);
  CHECK(sluice::detail::wire::frame_checksum(f) == sum);
  for (std::size_t off : {std::size_t{80}, std::size_t{80} + (1u << 18) - 1, std::size_t{80} + (1u << 20) + 5,
                          f.size() / 2, f.size() - 1}) {
    CAPTURE(off);
    auto g = f;
    g[off] ^= std::byte{0x10};
    expect_malformed(g, "checksum");
  }
  // Two equal-length blocks exchanged: the digests are keyed by block position.
  auto g = f;
  std::size_t const block = sluice::detail::wire::checksum_block;
  std::swap_ranges(g.begin() + 80, g.begin() + 80 + static_cast<std::ptrdiff_t>(block),
                   g.begin() + 80 + static_cast<std::ptrdiff_t>(block));
  REQUIRE(g != f);
  expect_malformed(g, "checksum");
}

TEST_CASE("block digests computed while writing give the checksum computed from scratch") {
  // Payloads around the single-pass limit and well past it; "threads" own arbitrary byte ranges
  // and report progress in uneven steps, as an encoder's threads would.
  for (std::size_t payload : {std::size_t{1} << 19, (std::size_t{3} << 20) + 40, (std::size_t{70} << 20) + 8}) {
    CAPTURE(payload);
    std::vector<std::byte> big(payload);
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
    auto const ref = make_frame({big}, h);
    std::uint64_t want = 0;
    std::memcpy(&want, ref.data() + 72, 8);
    for (std::size_t parts : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}}) {
      CAPTURE(parts);
      std::vector<std::byte> out(ref.size());
      wire::writer w(out, h);
      std::byte* const p = w.next().data();
      wire::block_digests d(wire::padded(payload));
      for (std::size_t t = 0; t < parts; ++t) {
        std::size_t const lo = payload * t / parts / 8 * 8,
                          hi = t + 1 == parts ? payload : payload * (t + 1) / parts / 8 * 8;
        wire::block_digests::hasher hs(d, p, lo, hi);
        for (std::size_t at = lo; at < hi;) {
          std::size_t const step = std::min(hi - at, std::size_t{4099} + 1000 * t);
          std::memcpy(p + at, big.data() + at, step);
          at += step;
          hs.done(at - (at < hi ? at % 3 : 0));  // sometimes short of what was written
        }
        hs.done(hi);
      }
      // All but the blocks that straddle two parts or reach into the padding were hashed here.
      std::size_t const blocks = sluice::detail::wire::block_digest_table(wire::padded(payload)).blocks;
      CHECK(d.hashed() + parts + 1 >= blocks);
      CHECK(d.hashed() <= blocks);
      w.commit(payload);
      REQUIRE(w.finish(&d) == ref.size());
      CHECK(out == ref);
    }
    // Digests laid out for another payload size are ignored.
    std::vector<std::byte> out(ref.size());
    wire::writer w(out, h);
    wire::block_digests d(payload + 64);
    std::memcpy(w.next().data(), big.data(), payload);
    wire::block_digests::hasher hs(d, w.next().data(), 0, payload);
    hs.done(payload);
    w.commit(payload);
    w.finish(&d);
    CHECK(out == ref);
  }
}

TEST_CASE("header fields are validated with messages that say what is wrong") {
  auto const good = make_frame({bytes({1, 2, 3})}, h);
  auto f = good;
  poke<std::uint32_t>(f, 0, 0xdeadbeef);
  expect_malformed(f, "bad magic");

  f = good;
  poke<std::uint16_t>(f, 4, wire::version + 1);
  reseal(f);
  expect_malformed(f, "newer than this reader");

  f = good;
  poke<std::uint16_t>(f, 6, 96);
  reseal(f);
  expect_malformed(f, "header size");

  f = good;
  poke<std::uint8_t>(f, 10, 9);
  reseal(f);
  expect_malformed(f, "unknown element type");

  f = good;
  poke<std::uint8_t>(f, 14, 1);
  reseal(f);
  expect_malformed(f, "reserved");

  f = good;
  poke<std::uint8_t>(f, 12, 5);
  reseal(f);
  expect_malformed(f, "section count");

  f = good;
  poke<std::uint64_t>(f, 48, 8);  // unused section 1 claims 8 bytes
  reseal(f);
  expect_malformed(f, "unused section");

  f = good;
  poke<std::uint64_t>(f, 72, 0);
  expect_malformed(f, "checksum");
}

TEST_CASE("section lengths that overflow or exceed the frame are rejected") {
  auto const good = make_frame({bytes({1, 2, 3}), bytes({4})}, h);
  for (std::uint64_t len : {std::uint64_t{9}, std::uint64_t{1} << 40, ~std::uint64_t{0}, ~std::uint64_t{0} - 6}) {
    auto f = good;
    poke<std::uint64_t>(f, 40, len);
    reseal(f);
    CHECK_THROWS_AS((void)wire::parse(f), sluice::error);
  }
  auto f = good;
  poke<std::uint64_t>(f, 40, ~std::uint64_t{0} - 3);  // padded() would wrap to a small number
  reseal(f);
  expect_malformed(f, "exceeds");
  // Non-zero padding is refused even with a valid checksum.
  f = good;
  f[80 + 5] = std::byte{1};
  reseal(f);
  expect_malformed(f, "padding");
}

TEST_CASE("expectations reject frames for another step, tensor, codec or shape") {
  auto const f = make_frame({bytes({1})}, h);
  expect_malformed(f, "step 99 where step 98", {.step = 98});
  expect_malformed(f, "tensor 12 where tensor 13", {.tensor = 13});
  expect_malformed(f, "codec id", {.codec = wire::codec_id::qsgd});
  expect_malformed(f, "element type f16 where f32", {.element = sluice::element_type::f32});
  expect_malformed(f, "extent", {.extent = 7});
  expect_malformed(f, "sections", {.sections = 2});
}

TEST_CASE("writer never writes outside its buffer") {
  std::vector<std::byte> small(79);
  CHECK_THROWS_AS(wire::writer(small, h), sluice::error);
  std::vector<std::byte> buf(80 + 8);
  wire::writer w(buf, h);
  CHECK_THROWS_AS(w.write(bytes({1, 2, 3, 4, 5, 6, 7, 8, 9})), sluice::error);
  w.write(bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  CHECK_THROWS_AS(w.commit(1), sluice::error);
  CHECK(w.finish() == 88);
  CHECK_NOTHROW((void)wire::parse(buf));

  std::vector<float> vals{1.5f, -2.0f};
  std::vector<std::byte> out(wire::frame_bytes({8}));
  wire::writer w2(out, h);
  wire::write_array<float>(w2, vals);
  w2.finish();
  auto const p = wire::parse(out);
  std::vector<float> back(2);
  wire::read_array<float>(p.section(0), back, "values");
  CHECK(back == vals);
  std::vector<float> wrong(3);
  CHECK_THROWS_AS(wire::read_array<float>(p.section(0), wrong, "values"), sluice::error);
}
