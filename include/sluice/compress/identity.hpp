// The identity codec: the dense tensor as it is, framed. The baseline every other codec is
// measured against, and what small layers and biases use (CGX leaves them uncompressed).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/core/serial.hpp>

namespace sluice {

/// Sends every element unchanged. Wire: section 0 = n values as T. Error: none (bit-exact).
struct identity {
  using codec_concept = codec_tag;
  static constexpr bool unbiased = true;

  friend bool operator==(identity const&, identity const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, identity const&) { h("identity"); }

  /// No per-tensor state (T is deduced from the workspace, so inputs convert to their spans).
  template <Element T>
  struct workspace {};

  /// Exact frame size for n elements of T (the default, float, bounds every T).
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    return wire::frame_bytes({n * sizeof(T)});
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes<T>(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>&,
                     std::span<std::byte> out) const {
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(in.size()), "identity");
    wire::writer w(out, detail::compress::make_header<T>(wire::codec_id::identity, ctx, in.size()));
    w.write(std::as_bytes(in));
    return w.finish();
  }

  /// Decodes into `dense`: copies the sent values (overwrite) or adds them into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>&,
                   std::type_identity_t<std::span<T>> dense, M) const {
    auto const v = values<T>(msg, dense.size(), ctx);
    if constexpr (!M::accumulates) {
      if (!v.empty()) std::memcpy(dense.data(), v.data(), v.size());
    } else {
      for (std::size_t i = 0; i < dense.size(); ++i) {
        T x;
        std::memcpy(&x, v.data() + i * sizeof(T), sizeof(T));
        dense[i] = from_float<T>(to_float(dense[i]) + to_float(x));
      }
    }
  }

 private:
  template <Element T>
  static std::span<std::byte const> values(std::span<std::byte const> msg, std::size_t n, encode_context const& ctx) {
    wire::frame const f = detail::compress::parse_frame<T>(msg, wire::codec_id::identity, n, 1, ctx);
    require(f.sections[0].size() == n * sizeof(T), errc::malformed_message,
            "identity: values section has {} bytes, expected {}", f.sections[0].size(), n * sizeof(T));
    return f.sections[0];
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::identity> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::identity const&, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "identity{{}}");
  }
};
