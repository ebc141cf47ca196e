// Shared pieces of every codec: the keep-count rule, frame header construction and validation
// against the receiving span, fixed-width section I/O and the fmt base for policy values.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/context.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/wire.hpp>

namespace sluice::detail::compress {

/// Elements a sparse codec keeps out of n for `ratio` in (0, 1]: ceil(ratio * n), computed in
/// double with a relative slack of 2^-40 so that representation error never adds one
/// (0.01 * 100 keeps exactly 1); at least 1 when n > 0, at most n.
inline std::size_t keep_count(double ratio, std::size_t n) noexcept {
  if (n == 0) return 0;
  double const x = ratio * static_cast<double>(n) * (1.0 - 0x1p-40);
  double const c = std::ceil(x);
  if (!(c >= 1.0)) return 1;
  if (c >= static_cast<double>(n)) return n;
  return static_cast<std::size_t>(c);
}

/// Throws errc::invalid_argument unless ratio is in (0, 1].
inline void check_ratio(double ratio, std::string_view codec) {
  require(ratio > 0.0 && ratio <= 1.0, errc::invalid_argument,
          "{}: ratio {} is outside (0, 1]; pass the fraction of elements to keep, e.g. 0.01", codec, ratio);
}

/// Throws errc::unsupported for tensors whose element indices do not fit the 32-bit indices of
/// sparse_buffer<T> (2^32 - 1 elements or more).
inline void check_index_range(std::size_t n, std::string_view codec) {
  require(n < std::numeric_limits<std::uint32_t>::max(), errc::unsupported,
          "{}: tensor of {} elements exceeds the 32-bit index range; split it into buckets", codec, n);
}

/// Throws errc::size_mismatch unless `out` can hold `need` bytes; called before writing.
inline void check_out(std::size_t have, std::size_t need, std::string_view codec) {
  require(have >= need, errc::size_mismatch,
          "{}: output buffer of {} bytes is smaller than the {} bytes this frame needs (size it with "
          "max_encoded_bytes)",
          codec, have, need);
}

/// The header every codec writes: tensor and step from the context, extent n.
template <Element T>
sluice::wire::header make_header(sluice::wire::codec_id id, encode_context const& ctx, std::size_t n,
                                 std::uint8_t flags = 0, element_type et = element_type_of<T>) noexcept {
  return {.codec = id, .element = et, .flags = flags, .tensor = ctx.tensor, .step = ctx.step, .extent = n};
}

/// Passed as the extent to parse_frame when the frame's own extent is wanted (sparse decoding).
inline constexpr std::size_t any_extent = std::numeric_limits<std::size_t>::max();

/// The codec's name for messages.
constexpr std::string_view codec_name(sluice::wire::codec_id id) noexcept {
  switch (id) {
    case sluice::wire::codec_id::identity:
      return "identity";
    case sluice::wire::codec_id::cast:
      return "cast";
    case sluice::wire::codec_id::top_k:
      return "top_k";
    case sluice::wire::codec_id::threshold_top_k:
      return "threshold_top_k";
    case sluice::wire::codec_id::block_top_k:
      return "block_top_k";
    case sluice::wire::codec_id::random_k:
      return "random_k";
    case sluice::wire::codec_id::sign:
      return "sign";
    case sluice::wire::codec_id::qsgd:
      return "qsgd";
    case sluice::wire::codec_id::maxmin_quantize:
      return "maxmin_quantize";
    case sluice::wire::codec_id::power_sgd:
      return "power_sgd";
    default:
      return "codec";
  }
}

/// Passed as the section count to parse_frame when the codec checks it itself (power_sgd).
inline constexpr std::size_t any_sections = std::numeric_limits<std::size_t>::max();

/// Parses `msg` as a frame of codec `id` for a dense destination of `extent` elements of T (or
/// any_extent) with exactly `sections` sections, sent for the context's tensor and step, with a
/// flags byte the encoder writes (at most `max_flags`; 0 for every codec but power_sgd).
/// errc::malformed_message otherwise (a wrong extent, tensor or step is a message for another
/// tensor or step, never a size_mismatch of the caller's making).
template <Element T>
sluice::wire::frame parse_frame(std::span<std::byte const> msg, sluice::wire::codec_id id, std::size_t extent,
                                std::size_t sections, encode_context const& ctx, element_type et = element_type_of<T>,
                                std::uint8_t max_flags = 0) {
  sluice::wire::expectation e{.codec = id, .element = et, .tensor = ctx.tensor, .step = ctx.step};
  if (extent != any_extent) e.extent = extent;
  if (sections != any_sections) e.sections = sections;
  sluice::wire::frame f = sluice::wire::parse(msg, e);
  require(f.head.flags <= max_flags, errc::malformed_message, "{} frame: flags byte is {}, the encoder writes {}",
          codec_name(id), f.head.flags, max_flags == 0 ? "0" : "0 or 1");
  return f;
}

/// Throws errc::malformed_message naming `field` unless a per-bucket fp32 scale is one an
/// encoder writes: non-negative (sign bit clear) and, unless `inf_ok`, not infinite; NaN marks a
/// bucket that held a non-finite value.
inline void check_scale(float s, std::size_t bucket, std::string_view codec, std::string_view field,
                        bool inf_ok = false) {
  require(!std::signbit(s) && (inf_ok || !std::isinf(s)), errc::malformed_message,
          "{}: {} of bucket {} is {}, which no encoder writes", codec, field, bucket, s);
}

/// Throws errc::malformed_message unless the bits past the last of `n` codes of `bits` bits in
/// a tightly packed section (the high bits of its last byte) are zero, as every encoder leaves
/// them: a frame that differs from the encoder's output only there would otherwise decode the same.
inline void check_padding_bits(std::span<std::byte const> packed, std::size_t n, unsigned bits,
                               std::string_view codec) {
  unsigned const used = static_cast<unsigned>((n * bits) % 8);
  if (used == 0 || packed.empty()) return;
  auto const last = std::to_integer<unsigned>(packed.back());
  require((last >> used) == 0, errc::malformed_message,
          "{}: the last packed byte 0x{:02x} has bits set past element {} (only its low {} bits carry codes); "
          "no encoder writes them",
          codec, last, n - 1, used);
}

/// The frame's extent, checked to fit 32-bit indices (sparse decoders index with uint32_t).
inline std::size_t checked_extent(sluice::wire::frame const& f, std::string_view codec) {
  require(f.head.extent < std::numeric_limits<std::uint32_t>::max(), errc::malformed_message,
          "{}: frame extent {} exceeds the 32-bit index range", codec, f.head.extent);
  return static_cast<std::size_t>(f.head.extent);
}

/// Copies `count` values of trivially copyable U from a section (unaligned-safe), checking the
/// section length is exactly count * sizeof(U).
template <class U>
void read_section(std::span<std::byte const> s, U* out, std::size_t count, std::string_view what) {
  require(s.size() / sizeof(U) == count && s.size() % sizeof(U) == 0, errc::malformed_message,
          "{} section has {} bytes, expected {}", what, s.size(), count * sizeof(U));
  if (count != 0) std::memcpy(out, s.data(), count * sizeof(U));
}

/// Reads the u32 at position i of a small parameter section (length already checked).
inline std::uint32_t param_u32(std::span<std::byte const> s, std::size_t i) noexcept {
  std::uint32_t v;
  std::memcpy(&v, s.data() + 4 * i, 4);
  return v;
}

/// Grows `v` to at least `n` elements; never shrinks, so steady-state calls do not allocate.
template <class V>
void grow(V& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

/// fmt base for policy values: no format spec.
struct policy_formatter {
  constexpr auto parse(fmt::format_parse_context& ctx) -> decltype(ctx.begin()) { return ctx.begin(); }
};

}  // namespace sluice::detail::compress
