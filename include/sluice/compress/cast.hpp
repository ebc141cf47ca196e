// Precision cast: send every element as fp16 or bf16 (or fp32), rounded to nearest even or
// stochastically from the counter-based stream. Halves the bytes of fp32 gradients; bf16 keeps
// fp32's range, fp16 keeps more mantissa but overflows past 65504.
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/quantize.hpp>
#include <sluice/compress/rounding.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/serial.hpp>

namespace sluice {

/// Casts to `to` on the wire. Wire: section 0 = n values as `to` (the header's element type is
/// `to`). Error: round-to-nearest |x - decoded| <= half an ulp of `to` (relative 2^-11 for f16,
/// 2^-8 for bf16, within the normal range; f16 overflows to Inf beyond 65504); stochastic
/// rounding < one ulp and unbiased. Decoding into a wider T is exact.
struct cast {
  using codec_concept = codec_tag;

  element_type to = element_type::f16;  ///< wire element type: f16, bf16 (or f32)
  rounding round = rounding::nearest;   ///< nearest-even, or stochastic from encode_context::key()

  friend bool operator==(cast const&, cast const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, cast const& v) { h("cast", v.to, v.round); }

  /// No per-tensor state (T is deduced from the workspace, so inputs convert to their spans).
  template <Element T>
  struct workspace {};

  /// Exact frame size for n elements (the same for every T).
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    return wire::frame_bytes({n * size_of(to)});
  }

  /// Throws errc::invalid_argument for an unknown element type or rounding mode.
  void validate() const {
    require(to == element_type::f16 || to == element_type::bf16 || to == element_type::f32, errc::invalid_argument,
            "cast: unknown target element type {}", static_cast<int>(to));
    require(round == rounding::nearest || round == rounding::stochastic, errc::invalid_argument,
            "cast: unknown rounding mode {}", static_cast<int>(round));
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>&,
                     std::span<std::byte> out) const {
    validate();
    std::size_t const n = in.size();
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(n), "cast");
    wire::writer w(out, detail::compress::make_header<T>(wire::codec_id::cast, ctx, n, 0, to));
    std::byte* const o = w.next().data();
    random_stream const stream(ctx.key());
    auto run = [&]<class U>(U*) {
      parallel_chunks(n, std::size_t{1} << 16, [&](std::size_t b, std::size_t e, int) {
        for (std::size_t i = b; i < e; ++i) {
          float const v = to_float(in[i]);
          U const u = round == rounding::nearest ? from_float<U>(v) : from_float_stochastic<U>(v, stream.word(i));
          std::memcpy(o + i * sizeof(U), &u, sizeof(U));
        }
      });
    };
    if (to == element_type::f16)
      run(static_cast<half*>(nullptr));
    else if (to == element_type::bf16)
      run(static_cast<bfloat16*>(nullptr));
    else
      run(static_cast<float*>(nullptr));
    w.commit(n * size_of(to));
    return w.finish();
  }

  /// Decodes into `dense`: overwrites every element (overwrite) or adds into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>&,
                   std::type_identity_t<std::span<T>> dense, M) const {
    constexpr bool add = M::accumulates;
    validate();
    std::size_t const n = dense.size();
    wire::frame const f = detail::compress::parse_frame<T>(msg, wire::codec_id::cast, n, 1, ctx, to);
    require(f.sections[0].size() == n * size_of(to), errc::malformed_message,
            "cast: values section has {} bytes, expected {}", f.sections[0].size(), n * size_of(to));
    std::byte const* const s = f.sections[0].data();
    auto run = [&]<class U>(U*) {
      for (std::size_t i = 0; i < n; ++i) {
        U u;
        std::memcpy(&u, s + i * sizeof(U), sizeof(U));
        float const v = to_float(u);
        dense[i] = add ? from_float<T>(to_float(dense[i]) + v) : from_float<T>(v);
      }
    };
    if (to == element_type::f16)
      run(static_cast<half*>(nullptr));
    else if (to == element_type::bf16)
      run(static_cast<bfloat16*>(nullptr));
    else
      run(static_cast<float*>(nullptr));
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::cast> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::cast const& c, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "cast{{.to = {}, .round = {}}}", sluice::to_string(c.to),
                          c.round == sluice::rounding::nearest ? "nearest" : "stochastic");
  }
};
