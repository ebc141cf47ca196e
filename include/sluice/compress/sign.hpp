// 1-bit sign compression with a per-bucket scale (signSGD with majority-free scaled decoding, as
// in EF-SignSGD, Karimireddy et al. ICML'19, and 1-bit SGD, Seide et al. 2014): each element is
// sent as its sign, each bucket as mean |x|; 32x smaller than fp32.
#pragma once

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
#include <sluice/compress/detail/bucketed.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/pack.hpp>
#include <sluice/core/serial.hpp>

namespace sluice {

/// Sign + scale. Wire: section 0 = {u32 bucket, u32 0}, section 1 = one f32 scale (mean |x|) per
/// bucket, section 2 = n sign bits (1 = negative), bit i of a little-endian bit stream. Decoded
/// value: -scale or +scale (0 and -0 decode to +scale). Error, per bucket of d elements:
/// ||x - decoded||^2 = ||x||^2 - d * scale^2 <= ||x||^2 (biased; pair with error feedback).
/// A bucket holding NaN decodes to NaN.
struct sign {
  using codec_concept = codec_tag;
  static constexpr bool is_quantizer = true;

  std::size_t bucket = 1024;  ///< elements per scale, in [1, 4096]

  friend bool operator==(sign const&, sign const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, sign const& v) { h("sign", v.bucket); }

  /// No per-tensor state (T is deduced from the workspace, so inputs convert to their spans).
  template <Element T>
  struct workspace {};

  [[nodiscard]] std::size_t bucket_count(std::size_t n) const noexcept {
    return bucket == 0 ? 0 : (n + bucket - 1) / bucket;
  }

  /// Exact frame size for n elements (the same for every T).
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    return wire::frame_bytes({8, 4 * bucket_count(n), detail::compress::packed_bytes(n, 1)});
  }

  /// Throws errc::invalid_argument for a bucket outside [1, 4096].
  void validate() const {
    require(bucket >= 1 && bucket <= detail::compress::max_bucket, errc::invalid_argument,
            "sign: bucket {} is outside [1, {}]", bucket, detail::compress::max_bucket);
  }

  /// One bucket: writes its sign codes and returns its scale (mean |x|).
  template <Element T>
  static float encode_bucket(T const* x, std::size_t len, std::uint8_t* codes) noexcept {
    // Summed in double: a float sum of finite values overflows to Inf (mean |x| never does).
    double sum = 0.0;
    for (std::size_t j = 0; j < len; ++j) {
      float const v = to_float(x[j]);
      sum += static_cast<double>(std::abs(v));
      codes[j] = static_cast<std::uint8_t>(v < 0.0f);
    }
    return len == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(len));
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>&,
                     std::span<std::byte> out) const {
    validate();
    std::size_t const n = in.size(), nb = bucket_count(n);
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(n), "sign");
    wire::writer w(out, detail::compress::make_header<T>(wire::codec_id::sign, ctx, n));
    std::uint32_t const params[2] = {static_cast<std::uint32_t>(bucket), 0};
    w.write(std::as_bytes(std::span(params)));
    std::byte* const scales = w.next().data();
    std::byte* const packed = scales + wire::padded(4 * nb);
    detail::compress::encode_buckets<1>(n, bucket, 1, scales, packed,
                                        [&](std::size_t first, std::size_t len, std::uint8_t* codes) {
                                          return std::array<float, 1>{encode_bucket(in.data() + first, len, codes)};
                                        });
    w.commit(4 * nb);
    w.commit(detail::compress::packed_bytes(n, 1));
    return w.finish();
  }

  /// Decodes into `dense`: overwrites every element (overwrite) or adds into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>&,
                   std::type_identity_t<std::span<T>> dense, M) const {
    constexpr bool add = M::accumulates;
    validate();
    std::size_t const n = dense.size(), nb = bucket_count(n);
    wire::frame const f = detail::compress::parse_frame<T>(msg, wire::codec_id::sign, n, 3, ctx);
    require(f.sections[0].size() == 8 && detail::compress::param_u32(f.sections[0], 0) == bucket,
            errc::malformed_message, "sign: parameter section does not match bucket {}", bucket);
    require(detail::compress::param_u32(f.sections[0], 1) == 0, errc::malformed_message,
            "sign: reserved parameter is {}, not 0", detail::compress::param_u32(f.sections[0], 1));
    require(f.sections[1].size() == 4 * nb && f.sections[2].size() == detail::compress::packed_bytes(n, 1),
            errc::malformed_message, "sign: sections of {} and {} bytes, expected {} and {}", f.sections[1].size(),
            f.sections[2].size(), 4 * nb, detail::compress::packed_bytes(n, 1));
    detail::compress::check_padding_bits(f.sections[2], n, 1, "sign");
    for (std::size_t b = 0; b < nb; ++b) {
      float s;
      std::memcpy(&s, f.sections[1].data() + 4 * b, 4);
      detail::compress::check_scale(s, b, "sign", "scale", true);  // Inf: the bucket held an Inf
    }
    detail::compress::decode_buckets<1>(
        n, bucket, 1, f.sections[1].data(), f.sections[2].data(),
        [&](std::size_t first, std::size_t len, std::array<float, 1> s, std::uint8_t const* codes) {
          for (std::size_t j = 0; j < len; ++j) {
            float const v = codes[j] != 0 ? -s[0] : s[0];
            T& d = dense[first + j];
            d = add ? from_float<T>(to_float(d) + v) : from_float<T>(v);
          }
        });
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::sign> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::sign const& c, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "sign{{.bucket = {}}}", c.bucket);
  }
};
