// Bucketed max-min quantization (CGX, Middleware'22 §4.1): per bucket of 64-4096 elements, store
// min and unit = (max - min) / (2^bits - 1) in fp32 and each element as a `bits`-bit level, tightly
// packed; round to nearest or stochastically from the counter-based stream (fixing CGX's
// stochastic rounding, and deterministic in (seed, rank, step, tensor) whatever the thread count).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/fused_quantize.hpp>
#include <sluice/compress/detail/pack.hpp>
#include <sluice/compress/detail/quantize.hpp>
#include <sluice/compress/rounding.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/serial.hpp>

namespace sluice {

/// Max-min quantizer. Wire: section 0 = {u32 bits, u32 bucket, u32 rounding, u32 0}, section 1 =
/// {f32 min, f32 unit} per bucket, section 2 = n levels of `bits` bits, level i at bits
/// [i*bits, (i+1)*bits) of a little-endian bit stream. Decoded value: min + level * unit, narrowed
/// to T. Error: round-to-nearest |x - decoded| <= unit / 2 (plus fp32 rounding of the grid and the
/// narrowing to T); stochastic rounding < unit and unbiased. A bucket holding NaN or Inf decodes to
/// NaN. Decoding is a pure function of the bytes, so every rank gets the same values.
struct maxmin_quantize {
  using codec_concept = codec_tag;
  static constexpr bool is_quantizer = true;

  unsigned bits = 4;  ///< bits per element, in [1, 8]
  /// Warm-up moves the bit width, from 8 bits.
  static constexpr codec_strength<maxmin_quantize, unsigned> strength{&maxmin_quantize::bits, "bits", 8};
  std::size_t bucket = 1024;           ///< elements per bucket, in [64, 4096]
  rounding round = rounding::nearest;  ///< nearest or stochastic (from encode_context::key())

  friend bool operator==(maxmin_quantize const&, maxmin_quantize const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, maxmin_quantize const& v) {
    h("maxmin_quantize", v.bits, v.bucket, v.round);
  }

  /// No per-tensor state (T is deduced from the workspace, so inputs convert to their spans).
  template <Element T>
  struct workspace {};

  /// Buckets of n elements.
  [[nodiscard]] std::size_t bucket_count(std::size_t n) const noexcept {
    return bucket == 0 ? 0 : (n + bucket - 1) / bucket;
  }

  /// Exact frame size for n elements (the same for every T).
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    return wire::frame_bytes({16, 8 * bucket_count(n), detail::compress::packed_bytes(n, bits)});
  }

  /// Throws errc::invalid_argument for bits outside [1, 8], bucket outside [64, 4096] or an unknown
  /// rounding mode.
  void validate() const {
    require(bits >= 1 && bits <= 8, errc::invalid_argument, "maxmin_quantize: bits {} is outside [1, 8]", bits);
    require(bucket >= 64 && bucket <= 4096, errc::invalid_argument,
            "maxmin_quantize: bucket {} is outside [64, 4096] (CGX uses 512 or 1024)", bucket);
    require(round == rounding::nearest || round == rounding::stochastic, errc::invalid_argument,
            "maxmin_quantize: unknown rounding mode {}", static_cast<int>(round));
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>&,
                     std::span<std::byte> out) const {
    validate();
    std::size_t const n = in.size(), nb = bucket_count(n);
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(n), "maxmin_quantize");
    wire::writer w(out, detail::compress::make_header<T>(wire::codec_id::maxmin_quantize, ctx, n));
    std::uint32_t const params[4] = {bits, static_cast<std::uint32_t>(bucket), static_cast<std::uint32_t>(round), 0};
    w.write(std::as_bytes(std::span(params)));
    std::byte* const ranges = w.next().data();
    std::byte* const packed = ranges + 8 * nb;  // 8 * nb is already a multiple of 8: no padding
    random_stream const stream(ctx.key());
    wire::block_digests digests(max_encoded_bytes<T>(n) - wire::header_bytes);
    auto const groups = [&](std::size_t b0, std::size_t b1, auto const& finished) {
      std::array<std::uint8_t, 4096> codes;
      for (std::size_t b = b0; b < b1; ++b) {
        std::size_t const first = b * bucket, len = std::min(bucket, n - first);
        std::size_t const next = b + 1 < b1 ? std::min(bucket, n - first - len) : 0;
        T const* const x = in.data() + first;
        // The next bucket's lines are requested while this bucket (already in L1) is quantized
        // and packed, so memory keeps streaming: spread over the packing loop where the 4-bit
        // body runs, else all at once here.
        bool const pack4 = std::is_same_v<T, float> && bits == 4 && round == rounding::nearest && first % 2 == 0;
        if (!pack4) detail::compress::prefetch_range(x + len, next);
        auto const r = detail::compress::maxmin_bucket_range(x, len, bits);
        std::memcpy(ranges + 8 * b, &r.min, 4);
        std::memcpy(ranges + 8 * b + 4, &r.unit, 4);
        std::size_t done = 0;  // elements quantized and packed in one go
        if constexpr (std::is_same_v<T, float>)
          if (pack4) {
            done = detail::compress::maxmin_pack4_nearest(x, len, r, packed + first / 2, x + len, next);
            if (done == 0) detail::compress::prefetch_range(x + len, next);
          }
        if (done < len) {
          detail::compress::maxmin_quantize_bucket(x + done, len - done, r, bits, round, stream, first + done,
                                                   codes.data());
          detail::compress::pack_codes_at(codes.data(), len - done, bits, packed, (first + done) * bits);
        }
        finished(b);
      }
    };
    detail::compress::maxmin_bucket_groups(n, bucket, bits, packed, digests, groups);
    w.commit(8 * nb);
    w.commit(detail::compress::packed_bytes(n, bits));
    return w.finish(&digests);
  }

  /// Fused error feedback (the optional Codec member, see compress/concepts.hpp): per bucket,
  /// c = grad + residual is ranged, quantized, packed and subtracted while it sits in L1.
  template <class S, Element T, class Slice>
  std::size_t encode_compensated(std::span<T const> grad, Slice const& residual, encode_context const& ctx,
                                 workspace<T>& ws, std::span<std::byte> out) const {
    return detail::compress::residual_fused_quantize<S>(*this, residual, grad, ctx, ws, out);
  }

  /// Decodes into `dense`: overwrites every element (overwrite) or adds into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>&,
                   std::type_identity_t<std::span<T>> dense, M) const {
    constexpr bool add = M::accumulates;
    validate();
    std::size_t const n = dense.size(), nb = bucket_count(n);
    wire::frame const f = detail::compress::parse_frame<T>(msg, wire::codec_id::maxmin_quantize, n, 3, ctx);
    auto const p = f.sections[0];
    require(p.size() == 16, errc::malformed_message, "maxmin_quantize: parameter section has {} bytes, expected 16",
            p.size());
    require(detail::compress::param_u32(p, 0) == bits && detail::compress::param_u32(p, 1) == bucket,
            errc::malformed_message, "maxmin_quantize: frame has {} bits and bucket {}, this decoder {} and {}",
            detail::compress::param_u32(p, 0), detail::compress::param_u32(p, 1), bits, bucket);
    require(
        detail::compress::param_u32(p, 2) <= 1 && detail::compress::param_u32(p, 3) == 0, errc::malformed_message,
        "maxmin_quantize: rounding parameter {} (0 or 1) or reserved parameter {} (0) is not what an encoder writes",
        detail::compress::param_u32(p, 2), detail::compress::param_u32(p, 3));
    require(f.sections[1].size() == 8 * nb, errc::malformed_message,
            "maxmin_quantize: range section has {} bytes, expected {}", f.sections[1].size(), 8 * nb);
    require(f.sections[2].size() == detail::compress::packed_bytes(n, bits), errc::malformed_message,
            "maxmin_quantize: level section has {} bytes, expected {}", f.sections[2].size(),
            detail::compress::packed_bytes(n, bits));
    detail::compress::check_padding_bits(f.sections[2], n, bits, "maxmin_quantize");
    std::byte const* const ranges = f.sections[1].data();
    std::byte const* const packed = f.sections[2].data();
    float const top = static_cast<float>((1u << bits) - 1u);
    for (std::size_t b = 0; b < nb; ++b) {
      detail::compress::maxmin_range r;
      std::memcpy(&r.min, ranges + 8 * b, 4);
      std::memcpy(&r.unit, ranges + 8 * b + 4, 4);
      detail::compress::check_scale(r.unit, b, "maxmin_quantize", "unit");
      require(!std::isinf(r.min) && std::isfinite(r.unit * top), errc::malformed_message,
              "maxmin_quantize: grid of bucket {} (min {}, unit {}) is not finite", b, r.min, r.unit);
    }
    parallel_chunks(nb, 32, [&](std::size_t bb, std::size_t be, int) {
      std::array<std::uint8_t, 4096> codes;
      for (std::size_t b = bb; b < be; ++b) {
        detail::compress::maxmin_range r;
        std::memcpy(&r.min, ranges + 8 * b, 4);
        std::memcpy(&r.unit, ranges + 8 * b + 4, 4);
        std::size_t const first = b * bucket, len = std::min(bucket, n - first);
        detail::compress::unpack_codes_at(packed, len, bits, first * bits, codes.data());
        T* SLUICE_RESTRICT d = dense.data() + first;
        if (add)
          for (std::size_t j = 0; j < len; ++j)
            d[j] = from_float<T>(to_float(d[j]) + detail::compress::maxmin_value(r, codes[j]));
        else
          for (std::size_t j = 0; j < len; ++j) d[j] = from_float<T>(detail::compress::maxmin_value(r, codes[j]));
      }
    });
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::maxmin_quantize> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::maxmin_quantize const& c, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "maxmin_quantize{{.bits = {}, .bucket = {}, .round = {}}}", c.bits, c.bucket,
                          c.round == sluice::rounding::nearest ? "nearest" : "stochastic");
  }
};
