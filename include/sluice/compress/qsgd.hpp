// QSGD (Alistarh et al., NeurIPS 2017): per bucket, the L2 norm in fp32 and each element as a sign
// and one of s + 1 levels of |x| / norm, stochastically rounded from the counter-based stream, so
// the decoded tensor is an unbiased estimate of the input.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/detail/bucketed.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/pack.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/serial.hpp>

namespace sluice {

/// QSGD with s levels. Wire: section 0 = {u32 levels, u32 bucket}, section 1 = one f32 L2 norm
/// per bucket, section 2 = n codes of 1 + bit_width(s) bits (bit 0 = negative, bits 1.. = level
/// l in [0, s]), tightly packed. Decoded value: sign * norm * l / s. Unbiased (E[decoded] = x);
/// |x - decoded| < norm / s. Codes are fixed width (the paper's Elias coding is not used: it
/// would make the frame size data-dependent and the decoder sequential). A bucket holding NaN or
/// Inf decodes to NaN; finite values never do (the norm is computed in double, and one above
/// max_norm is sent as max_norm: still unbiased, error < max_norm / s).
struct qsgd {
  using codec_concept = codec_tag;
  static constexpr bool is_quantizer = true;
  static constexpr bool unbiased = true;

  unsigned levels = 7;  ///< s, in [1, 127]
  /// Warm-up moves the level count, from 127 levels.
  static constexpr codec_strength<qsgd, unsigned> strength{&qsgd::levels, "levels", 127};
  std::size_t bucket = 512;  ///< elements per norm, in [1, 4096]

  friend bool operator==(qsgd const&, qsgd const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, qsgd const& v) { h("qsgd", v.levels, v.bucket); }

  /// No per-tensor state (T is deduced from the workspace, so inputs convert to their spans).
  template <Element T>
  struct workspace {};

  /// The largest norm sent: norm * (l / s) never rounds past FLT_MAX below it.
  static constexpr float max_norm = 0x1.ffff00p127f;

  /// ω, the bound of Alistarh et al. (Lemma 3.1) on the variance per bucket:
  /// E|decoded - x|² <= ω |x|² with ω = min(b / s², sqrt(b) / s) for buckets of b elements.
  [[nodiscard]] double variance_bound() const noexcept {
    double const b = static_cast<double>(bucket), s = static_cast<double>(levels);
    return std::min(b / (s * s), std::sqrt(b) / s);
  }

  /// The largest bucket whose variance bound is at most 1/2 for `levels` (s² / 2 elements, at
  /// least 1): what error feedback needs. The residual keeps x - decoded, whose expected square is
  /// ω |x|², so it shrinks from step to step only for ω < 1 (the pipeline refuses ω >= 1 with
  /// feedback); at ω <= 1/2 it at least halves. 7 levels (4-bit codes): 24 elements per norm.
  [[nodiscard]] static constexpr std::size_t feedback_bucket(unsigned levels) noexcept {
    return std::clamp<std::size_t>(std::size_t{levels} * levels / 2, 1, detail::compress::max_bucket);
  }

  /// Bits per element: a sign and a level in [0, s].
  [[nodiscard]] unsigned code_bits() const noexcept { return 1u + static_cast<unsigned>(std::bit_width(levels)); }
  [[nodiscard]] std::size_t bucket_count(std::size_t n) const noexcept {
    return bucket == 0 ? 0 : (n + bucket - 1) / bucket;
  }

  /// Exact frame size for n elements (the same for every T).
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    return wire::frame_bytes({8, 4 * bucket_count(n), detail::compress::packed_bytes(n, code_bits())});
  }

  /// Throws errc::invalid_argument for levels outside [1, 127] or a bucket outside [1, 4096].
  void validate() const {
    require(levels >= 1 && levels <= 127, errc::invalid_argument, "qsgd: levels {} is outside [1, 127]", levels);
    require(bucket >= 1 && bucket <= detail::compress::max_bucket, errc::invalid_argument,
            "qsgd: bucket {} is outside [1, {}]", bucket, detail::compress::max_bucket);
  }

  /// One bucket starting at stream word `first`: writes its codes and returns its norm.
  template <Element T>
  float encode_bucket(T const* x, std::size_t len, random_stream const& stream, std::size_t first,
                      std::uint8_t* codes) const noexcept {
    // The sum of squares in double: in float it overflows once the norm passes ~1.8e19. A norm
    // beyond max_norm (finite values near FLT_MAX) is sent as max_norm: any scale >= max |x| keeps
    // the levels unbiased, and decoded values stay finite.
    double sq = 0.0;
    for (std::size_t j = 0; j < len; ++j) {
      double const v = static_cast<double>(to_float(x[j]));
      sq += v * v;
    }
    double const wide = std::sqrt(sq);
    float const norm = !std::isfinite(wide)                    ? std::numeric_limits<float>::quiet_NaN()
                       : wide <= static_cast<double>(max_norm) ? static_cast<float>(wide)
                                                               : max_norm;
    float const s = static_cast<float>(levels);
    for (std::size_t j = 0; j < len; ++j) {
      float const v = to_float(x[j]);
      float l = std::abs(v) / norm * s + stream.uniform(first + j);
      l = l > 0.0f ? l : 0.0f;  // NaN (norm 0 or non-finite) -> 0
      l = l < s ? l : s;
      codes[j] = static_cast<std::uint8_t>((static_cast<unsigned>(static_cast<int>(l)) << 1) | (v < 0.0f ? 1u : 0u));
    }
    bool const finite = std::isfinite(norm);
    return finite ? norm : std::numeric_limits<float>::quiet_NaN();
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>&,
                     std::span<std::byte> out) const {
    validate();
    std::size_t const n = in.size(), nb = bucket_count(n);
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(n), "qsgd");
    wire::writer w(out, detail::compress::make_header<T>(wire::codec_id::qsgd, ctx, n));
    std::uint32_t const params[2] = {levels, static_cast<std::uint32_t>(bucket)};
    w.write(std::as_bytes(std::span(params)));
    std::byte* const scales = w.next().data();
    std::byte* const packed = scales + wire::padded(4 * nb);
    random_stream const stream(ctx.key());
    detail::compress::encode_buckets<1>(
        n, bucket, code_bits(), scales, packed, [&](std::size_t first, std::size_t len, std::uint8_t* codes) {
          return std::array<float, 1>{encode_bucket(in.data() + first, len, stream, first, codes)};
        });
    w.commit(4 * nb);
    w.commit(detail::compress::packed_bytes(n, code_bits()));
    return w.finish();
  }

  /// Decodes into `dense`: overwrites every element (overwrite) or adds into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>&,
                   std::type_identity_t<std::span<T>> dense, M) const {
    constexpr bool add = M::accumulates;
    validate();
    std::size_t const n = dense.size(), nb = bucket_count(n);
    unsigned const bits = code_bits();
    wire::frame const f = detail::compress::parse_frame<T>(msg, wire::codec_id::qsgd, n, 3, ctx);
    require(f.sections[0].size() == 8 && detail::compress::param_u32(f.sections[0], 0) == levels &&
                detail::compress::param_u32(f.sections[0], 1) == bucket,
            errc::malformed_message, "qsgd: parameter section does not match levels {} and bucket {}", levels, bucket);
    require(f.sections[1].size() == 4 * nb && f.sections[2].size() == detail::compress::packed_bytes(n, bits),
            errc::malformed_message, "qsgd: sections of {} and {} bytes, expected {} and {}", f.sections[1].size(),
            f.sections[2].size(), 4 * nb, detail::compress::packed_bytes(n, bits));
    detail::compress::check_padding_bits(f.sections[2], n, bits, "qsgd");
    for (std::size_t b = 0; b < nb; ++b) {
      float s;
      std::memcpy(&s, f.sections[1].data() + 4 * b, 4);
      detail::compress::check_scale(s, b, "qsgd", "norm");
    }
    // With s = 2^k - 1 every code of the width is a valid level; otherwise codes above s (which
    // would decode beyond the error bound) are looked for before anything is written.
    if ((levels & (levels + 1)) != 0) check_levels(n, bits, f.sections[2].data());
    float const inv_s = 1.0f / static_cast<float>(levels);
    detail::compress::decode_buckets<1>(
        n, bucket, bits, f.sections[1].data(), f.sections[2].data(),
        [&](std::size_t first, std::size_t len, std::array<float, 1> s, std::uint8_t const* codes) {
          for (std::size_t j = 0; j < len; ++j) {
            float const mag = s[0] * (static_cast<float>(codes[j] >> 1) * inv_s);
            float const v = (codes[j] & 1u) != 0 ? -mag : mag;
            T& d = dense[first + j];
            d = add ? from_float<T>(to_float(d) + v) : from_float<T>(v);
          }
        });
  }

 private:
  /// errc::malformed_message naming the element when a level code exceeds s.
  void check_levels(std::size_t n, unsigned bits, std::byte const* packed) const {
    std::array<std::uint8_t, detail::compress::max_bucket> codes;
    for (std::size_t first = 0; first < n; first += bucket) {
      std::size_t const len = std::min(bucket, n - first);
      detail::compress::unpack_codes_at(packed, len, bits, first * bits, codes.data());
      for (std::size_t j = 0; j < len; ++j)
        require((codes[j] >> 1) <= levels, errc::malformed_message,
                "qsgd: level code {} of element {} exceeds the {} levels", codes[j] >> 1, first + j, levels);
    }
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::qsgd> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::qsgd const& c, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "qsgd{{.levels = {}, .bucket = {}}}", c.levels, c.bucket);
  }
};
