// Regression tests for frames no encoder writes (flags, reserved parameters, level codes, negative
// scales, another tensor or step), sizes taken from the wire (random_k's draw), finite inputs that
// used to decode to NaN, and the PowerSGD warm start's persistence.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include <sluice/compress/all.hpp>
#include <sluice/core/serial.hpp>

#include "compress/codec_testing.hpp"
#include "support/compress_reference.hpp"

namespace {

using namespace sluice;
using namespace sluice::test;

// Frame offsets (core/wire.hpp): flags at 11, sections from 80 (each padded to 8).
constexpr std::size_t flags_at = 11, payload_at = 80;

template <class C>
void expect_rejected_after(C const& c, std::vector<std::byte> msg, std::size_t n, encode_context const& ctx,
                           auto&& edit) {
  edit(msg);
  reseal(msg);
  std::vector<float> dense(n);
  codec_workspace<C, float> ws{};
  expect_errc([&] { sluice::decode(c, std::span<std::byte const>(msg), ctx, ws, std::span<float>(dense)); },
              errc::malformed_message);
}

template <class C>
void check_flags_and_identity(C const& c, std::size_t n) {
  CAPTURE(fmt::format("{}", c));
  std::vector<std::size_t> const shape = {n / 8, 8};
  encode_context const ctx{.seed = 3, .step = 11, .tensor = 5, .shape = shape};
  auto const x = gaussian<float>(n, 1);
  codec_workspace<C, float> ws{};
  auto const msg = encode(c, x, ws, ctx);
  std::vector<float> y(n);
  sluice::decode(c, std::span<std::byte const>(msg), ctx, ws, std::span<float>(y));  // the right context decodes
  expect_rejected_after(c, msg, n, ctx, [](auto& m) { m[flags_at] = std::byte{0x80}; });
  // The context's step and tensor are checked against the header.
  for (encode_context other : {encode_context{.seed = 3, .step = 12, .tensor = 5, .shape = shape},
                               encode_context{.seed = 3, .step = 11, .tensor = 6, .shape = shape}}) {
    expect_errc([&] { sluice::decode(c, std::span<std::byte const>(msg), other, ws, std::span<float>(y)); },
                errc::malformed_message);
    expect_errc([&] { sluice::decode_add(c, std::span<std::byte const>(msg), other, ws, std::span<float>(y)); },
                errc::malformed_message);
    if constexpr (SparseCodec<C, float>) {
      sparse_buffer<float> sb;
      expect_errc([&] { c.decode_sparse(std::span<std::byte const>(msg), other, ws, sb); }, errc::malformed_message);
    }
  }
}

}  // namespace

TEST_CASE("every codec refuses a flags byte it never writes and a frame for another step or tensor") {
  check_flags_and_identity(identity{}, 1024);
  check_flags_and_identity(cast{}, 1024);
  check_flags_and_identity(top_k{.ratio = 0.1}, 1024);
  check_flags_and_identity(threshold_top_k{}, 1024);
  check_flags_and_identity(block_top_k{.ratio = 0.1}, 1024);
  check_flags_and_identity(random_k{.ratio = 0.1}, 1024);
  check_flags_and_identity(sign{}, 1024);
  check_flags_and_identity(qsgd{}, 1024);
  check_flags_and_identity(maxmin_quantize{}, 1024);
  check_flags_and_identity(power_sgd{.rank = 2}, 4096);
}

TEST_CASE("reserved parameters, out-of-range level codes and negative scales are refused") {
  std::size_t const n = 512;
  auto const x = gaussian<float>(n, 2);
  encode_context const ctx{};
  {
    sign const c{.bucket = 64};
    codec_workspace<sign, float> ws;
    auto const msg = encode(c, x, ws);
    expect_rejected_after(c, msg, n, ctx, [](auto& m) { m[payload_at + 4] = std::byte{1}; });          // reserved u32
    expect_rejected_after(c, msg, n, ctx, [](auto& m) { m[payload_at + 8 + 3] |= std::byte{0x80}; });  // -scale
  }
  {
    maxmin_quantize const c{.bits = 4, .bucket = 128};
    codec_workspace<maxmin_quantize, float> ws;
    auto const msg = encode(c, x, ws);
    expect_rejected_after(c, msg, n, ctx, [](auto& m) { m[payload_at + 8] = std::byte{2}; });           // rounding 2
    expect_rejected_after(c, msg, n, ctx, [](auto& m) { m[payload_at + 12] = std::byte{1}; });          // reserved u32
    expect_rejected_after(c, msg, n, ctx, [](auto& m) { m[payload_at + 16 + 7] |= std::byte{0x80}; });  // -unit
    expect_rejected_after(c, msg, n, ctx, [](auto& m) {                                                 // unit = Inf
      float const inf = std::numeric_limits<float>::infinity();
      std::memcpy(m.data() + payload_at + 16 + 4, &inf, 4);
    });
  }
  {
    // 5 levels: codes are 1 + 3 bits, so levels 6 and 7 fit the width but exceed s.
    qsgd const c{.levels = 5, .bucket = 64};
    codec_workspace<qsgd, float> ws;
    auto const msg = encode(c, x, ws);
    std::size_t const codes_at = payload_at + 8 + wire::padded(4 * (n / 64));
    expect_rejected_after(c, msg, n, ctx, [&](auto& m) { m[codes_at] = std::byte{0x0e}; });  // level 7, sign 0
    expect_rejected_after(c, msg, n, ctx, [](auto& m) { m[payload_at + 8 + 3] |= std::byte{0x80}; });  // -norm
  }
}

TEST_CASE("random_k sizes its draw by what the frame holds, not by the extent it claims") {
  // A frame of 4295 values (17 KB) claiming 2^32 - 2 elements at ratio 1e-6 is consistent; the
  // draw used to size a 512 MiB bitmap from the extent.
  random_k const c{.ratio = 1e-6};
  std::size_t const n = 0xFFFFFFFEu, k = c.keep(n);
  REQUIRE(k == 4295);
  std::vector<std::byte> msg(wire::frame_bytes({k * 4}));
  wire::writer w(
      msg, {.codec = wire::codec_id::random_k, .element = element_type::f32, .tensor = 1, .step = 2, .extent = n});
  std::vector<float> values(k, 1.0f);
  w.write(std::as_bytes(std::span(values)));
  msg.resize(w.finish());
  random_k::workspace<float> ws;
  sparse_buffer<float> sb;
  c.decode_sparse(std::span<std::byte const>(msg), {.seed = 4, .step = 2, .tensor = 1}, ws, sb);
  CHECK(sb.nnz() == k);
  CHECK(ws.bitmap.size() <= 4 * k + 64);
  sb.view().validate();
  // The sparse draw gives the same set as the bitmap draw.
  std::size_t const m = 1000000;
  random_k const d{.ratio = 1e-4};
  random_k::workspace<float> a;
  d.draw(m, 9, 1, 2, a);
  std::size_t const kk = d.keep(m);
  std::vector<std::uint64_t> bits;
  std::vector<std::uint32_t> dense_draw(kk);
  detail::compress::draw_indices(random_stream(stream_key{9, stream_key::shared_rank, 1, 2}), m, kk, bits,
                                 dense_draw.data());  // small k: the table path
  CHECK(std::equal(dense_draw.begin(), dense_draw.end(), a.indices.begin()));
  // Force the bitmap path on the same draw by drawing from a small universe both ways.
  for (std::size_t const universe : {std::size_t{100}, std::size_t{100000}}) {
    std::vector<std::uint32_t> one(10), two(10);
    random_stream const st(stream_key{1, stream_key::shared_rank, 3, 4});
    detail::compress::draw_indices(st, universe, 10, bits, one.data());
    // Reference: Floyd's algorithm with std::set.
    std::set<std::uint32_t> ref;
    for (std::size_t j = universe - 10; j < universe; ++j) {
      auto const t = st.below(j - (universe - 10), static_cast<std::uint32_t>(j + 1));
      if (!ref.insert(t).second) ref.insert(static_cast<std::uint32_t>(j));
    }
    CHECK(std::equal(one.begin(), one.end(), ref.begin(), ref.end()));
    (void)two;
  }
}

TEST_CASE("finite inputs decode to finite values: qsgd norms past 1.8e19, sign, max-min ranges past FLT_MAX") {
  std::size_t const n = 256;
  std::vector<float> x = gaussian<float>(n, 3);
  for (auto& v : x) v *= 1e20f;  // squares overflow float
  x[7] = 3.0e38f, x[9] = -3.0e38f;
  auto finite = [](std::vector<float> const& y) {
    for (float v : y)
      if (!std::isfinite(v)) return false;
    return true;
  };
  {
    qsgd const c{.levels = 7, .bucket = 128};
    codec_workspace<qsgd, float> ws;
    for (std::uint64_t step = 0; step < 20; ++step) {
      encode_context const ctx{.seed = 1, .step = step};
      auto const y = decode<float>(c, encode(c, x, ws, ctx), n, ws, ctx);
      CHECK(finite(y));
      for (std::size_t i = 0; i < n; ++i)  // within scale / s of x, scale <= FLT_MAX
        CHECK(std::abs(static_cast<double>(y[i]) - x[i]) <= std::numeric_limits<float>::max() / 7.0 * 1.0001);
    }
    std::vector<float> z = gaussian<float>(n, 4);
    for (auto& v : z) v *= 1e20f;
    auto const y = decode<float>(c, encode(c, z, ws), n, ws);
    CHECK(finite(y));
  }
  {
    sign const c{.bucket = 128};
    codec_workspace<sign, float> ws;
    std::vector<float> big(n, 3e38f);
    auto const y = decode<float>(c, encode(c, big, ws), n, ws);
    CHECK(finite(y));
    CHECK(y[0] == 3e38f);
  }
  for (unsigned bits : {1u, 2u, 4u, 8u})
    for (auto round : {rounding::nearest, rounding::stochastic}) {
      CAPTURE(bits);
      maxmin_quantize const c{.bits = bits, .bucket = 128, .round = round};
      codec_workspace<maxmin_quantize, float> ws;
      auto const y = decode<float>(c, encode(c, x, ws), n, ws);
      CHECK(finite(y));
      CHECK(y[9] == -3.0e38f);  // the grid starts at min
    }
}

TEST_CASE("power_sgd state: 16 crafted bytes, flips and odd shapes are malformed_message, never an abort") {
  power_sgd::workspace<float> ws;
  // The old format: rows = 2^64 - 1, cols = 0 (once an assertion in the matrix resize).
  std::vector<std::byte> crafted(16);
  std::uint64_t const dims[2] = {~std::uint64_t{0}, 0};
  std::memcpy(crafted.data(), dims, 16);
  expect_errc([&] { ws.restore(crafted); }, errc::malformed_message);
  // The same shape in a well-formed record with a valid checksum.
  std::vector<std::byte> rec;
  serial::start_record(rec, power_sgd::state_magic, 1);
  serial::put(rec, dims[0]);
  serial::put(rec, dims[1]);
  serial::seal(rec);
  expect_errc([&] { ws.restore(rec); }, errc::malformed_message);
  // A real state: every flipped byte is refused, and nothing changes.
  std::size_t const shape[2] = {64, 32};
  power_sgd const c{.rank = 2};
  auto const x = gaussian<float>(64 * 32, 5);
  (void)encode(c, x, ws, {.shape = shape});
  std::vector<std::byte> state(ws.state_bytes());
  ws.save(state);
  power_sgd::workspace<float> other;
  for (std::size_t i = 0; i < state.size(); ++i) {
    auto bad = state;
    bad[i] ^= std::byte{1};
    expect_errc([&] { other.restore(bad); }, errc::malformed_message);
  }
  CHECK(other.q.size() == 0);
  other.restore(state);
  CHECK(other.q == ws.q);
  CHECK((other.q_rows == 32 && other.q_cols == 2));
  // An empty warm start round-trips too.
  power_sgd::workspace<float> empty, back;
  std::vector<std::byte> e(empty.state_bytes());
  empty.save(e);
  back.restore(e);
  CHECK(back.q.size() == 0);
}

TEST_CASE("power_sgd: gradients past 1e19 decode finite (the warm-started product used to overflow)") {
  std::size_t const rows = 48, cols = 40;
  std::size_t const shape[2] = {rows, cols};
  power_sgd const c{.rank = 2};
  power_sgd::workspace<float> ws;
  auto const u = gaussian<float>(rows, 1), v = gaussian<float>(cols, 2);
  for (float scale : {1e25f, 1e37f}) {
    CAPTURE(scale);
    std::vector<float> x(rows * cols);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) x[i * cols + j] = u[i] * v[j] * scale;  // rank 1
    for (std::uint64_t step = 0; step < 3; ++step) {
      encode_context const ctx{.seed = 1, .step = step, .shape = shape};
      auto const y = decode<float>(c, encode(c, x, ws, ctx), x.size(), ws, ctx);
      double err = 0, ref = 0;
      bool finite = true;
      for (std::size_t i = 0; i < x.size(); ++i) {
        finite = finite && std::isfinite(y[i]);
        err += std::pow((static_cast<double>(y[i]) - x[i]) / scale, 2);
        ref += std::pow(static_cast<double>(x[i]) / scale, 2);
      }
      CHECK(finite);
      CHECK(std::sqrt(err) <= 1e-3 * std::sqrt(ref));  // rank(M) = 1 <= r: recovered
    }
  }
}

namespace {

// Encodes n elements with `c`, checks the frame decodes, then sets each padding bit of the last
// packed byte in turn (resealed): every such frame must be refused.
template <class C>
void check_padding_refused(C const& c, std::size_t n, unsigned bits) {
  CAPTURE(fmt::format("{}", c));
  CAPTURE(n);
  encode_context const ctx{.seed = 9, .step = 4, .tensor = 1};
  auto const x = gaussian<float>(n, 7);
  codec_workspace<C, float> ws{};
  auto const msg = encode(c, x, ws, ctx);
  std::vector<float> y(n);
  sluice::decode(c, std::span<std::byte const>(msg), ctx, ws, std::span<float>(y));
  wire::frame const f = wire::parse(msg);
  REQUIRE(f.section_count == 3);
  std::size_t const last = static_cast<std::size_t>(f.sections[2].data() - msg.data()) + f.sections[2].size() - 1;
  unsigned const used = static_cast<unsigned>((n * bits) % 8);
  REQUIRE(used != 0);
  CHECK((std::to_integer<unsigned>(msg[last]) >> used) == 0);  // what the encoder writes
  for (unsigned b = used; b < 8; ++b)
    expect_rejected_after(c, msg, n, ctx, [&](auto& m) { m[last] |= std::byte{static_cast<unsigned char>(1u << b)}; });
}

}  // namespace

TEST_CASE("bits past the last element in the last packed byte are refused (sign, qsgd, maxmin_quantize)") {
  for (std::size_t n : {1, 5, 67, 1001}) {
    check_padding_refused(sign{.bucket = 64}, n, 1);
    check_padding_refused(qsgd{.levels = 1, .bucket = 64}, n, 2);  // 2-bit codes: n odd leaves padding
  }
  for (std::size_t n : {3, 131, 1001}) {
    check_padding_refused(qsgd{.levels = 5, .bucket = 64}, n, 4);
    check_padding_refused(maxmin_quantize{.bits = 4, .bucket = 128}, n, 4);
    check_padding_refused(maxmin_quantize{.bits = 3, .bucket = 64}, n, 3);
    check_padding_refused(maxmin_quantize{.bits = 1, .bucket = 64, .round = rounding::stochastic}, n, 1);
  }
}
