// Helpers shared by the codec tests: encode into a buffer sized by max_encoded_bytes, expect a
// given errc, and the truncation / corruption sweep every codec must survive.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/context.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/core/wire.hpp>

namespace sluice::test {

/// Runs f and checks it throws sluice::error of kind e.
template <class F>
void expect_errc(F&& f, errc e) {
  try {
    f();
    FAIL("expected sluice::error");
  } catch (sluice::error const& err) {
    CHECK_MESSAGE(err.kind() == e, err.what());
  }
}

/// Encodes `x` with a buffer of exactly max_encoded_bytes<T>(n) and checks the size bound.
template <class C, class T>
std::vector<std::byte> encode(C const& c, std::vector<T> const& x, codec_workspace<C, T>& ws,
                              encode_context const& ctx = {}) {
  std::vector<std::byte> out(c.template max_encoded_bytes<T>(x.size()));
  std::size_t const n = c.encode(std::span<T const>(x), ctx, ws, std::span<std::byte>(out));
  CHECK(n <= out.size());
  CHECK(n <= c.max_encoded_bytes(x.size()));  // the float bound covers every T
  out.resize(n);
  return out;
}

template <class T, class C>
std::vector<T> decode(C const& c, std::vector<std::byte> const& msg, std::size_t n, codec_workspace<C, T>& ws,
                      encode_context const& ctx = {}) {
  std::vector<T> y(n, T(7.0f));
  sluice::decode(c, std::span<std::byte const>(msg), ctx, ws, std::span<T>(y));
  return y;
}

inline void reseal(std::vector<std::byte>& f) {
  std::uint64_t const s = detail::wire::frame_checksum(f);
  std::memcpy(f.data() + 72, &s, 8);
}

/// Every decoder must reject truncated and corrupted frames with errc::malformed_message and never
/// touch memory it does not own (ASan checks the latter). Corruptions with a recomputed checksum
/// reach the codec's own validation: those may decode (the bytes may still be a valid frame) but
/// may only throw malformed_message.
template <class C, class T>
void check_malformed(C const& c, std::vector<std::byte> const& msg, std::size_t n, encode_context const& ctx = {}) {
  codec_workspace<C, T> ws{};
  std::vector<T> dense(n);
  auto run = [&](std::vector<std::byte> const& m) {
    sluice::decode(c, std::span<std::byte const>(m), ctx, ws, std::span<T>(dense));
    sluice::decode_add(c, std::span<std::byte const>(m), ctx, ws, std::span<T>(dense));
    if constexpr (SparseCodec<C, T>) {
      sparse_buffer<T> sb;
      c.decode_sparse(std::span<std::byte const>(m), ctx, ws, sb);
      sb.view().validate();
    }
  };
  std::size_t const step = std::max<std::size_t>(1, msg.size() / 97);
  for (std::size_t len = 0; len < msg.size(); len += step) {
    std::vector<std::byte> t(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(len));
    expect_errc([&] { run(t); }, errc::malformed_message);
  }
  std::uint32_t rng = 12345;
  for (std::size_t pos = 0; pos < msg.size(); pos += step) {
    std::vector<std::byte> t = msg;
    rng = rng * 1664525u + 1013904223u;
    t[pos] ^= static_cast<std::byte>(1u + (rng >> 24) % 255u);
    expect_errc([&] { run(t); }, errc::malformed_message);
    if (pos >= 72 && pos < 80) continue;
    reseal(t);
    try {
      run(t);
    } catch (sluice::error const& e) {
      CHECK_MESSAGE(e.kind() == errc::malformed_message, e.what());
    }
  }
  // A valid frame for a different extent is another tensor's message.
  if (n > 0) {
    std::vector<T> other(n - 1);
    expect_errc([&] { sluice::decode(c, std::span<std::byte const>(msg), ctx, ws, std::span<T>(other)); },
                errc::malformed_message);
  }
}

}  // namespace sluice::test
