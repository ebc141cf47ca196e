// Frames of sections computed elsewhere: what an encoder outside compress/ (the CUDA backend,
// which computes a frame's sections on the device) needs to write the same frame as the codec.
// The public face of the helpers every codec writes its frames with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <sluice/compress/context.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/pack.hpp>
#include <sluice/compress/detail/sparse_frame.hpp>
#include <sluice/core/element.hpp>

namespace sluice {

/// Bytes of `count` levels of `bits` bits packed as a little-endian bit stream (the levels
/// section of maxmin_quantize).
constexpr std::size_t packed_level_bytes(std::size_t count, unsigned bits) noexcept {
  return detail::compress::packed_bytes(count, bits);
}

/// Packs `len` levels of `bits` bits at bit `bit_offset` of `out` by OR-ing into bytes that must
/// start zeroed (the levels of a bucket whose start is not byte-aligned).
inline void pack_levels_at(std::uint8_t const* levels, std::size_t len, unsigned bits, std::byte* out,
                           std::size_t bit_offset) noexcept {
  detail::compress::pack_codes_at(levels, len, bits, out, bit_offset);
}

/// The header a codec writes for a tensor of n elements of T encoded under ctx.
template <Element T>
wire::header frame_header(wire::codec_id id, encode_context const& ctx, std::size_t n) noexcept {
  return detail::compress::make_header<T>(id, ctx, n);
}

/// Throws errc::size_mismatch, naming `who`, unless an output of `have` bytes holds the `need`
/// bytes of a frame; called before anything is written.
inline void require_frame_bytes(std::size_t have, std::size_t need, std::string_view who) {
  detail::compress::check_out(have, need, who);
}

/// Throws errc::unsupported, naming `who`, for a tensor of n elements whose indices do not fit
/// the 32-bit indices of sparse frames.
inline void require_index_range(std::size_t n, std::string_view who) { detail::compress::check_index_range(n, who); }

/// Writes the sparse frame of codec `id` (top_k's layout: values, then the indices encoded): the
/// indices strictly increasing and below n, the values in their order. `out` must hold the
/// codec's max_encoded_bytes (require_frame_bytes). Returns the frame's size.
template <Element T>
std::size_t write_sparse_frame(wire::codec_id id, encode_context const& ctx, std::size_t n,
                               std::span<std::uint32_t const> indices, std::span<T const> values,
                               std::span<std::byte> out) {
  return detail::compress::write_sparse_frame<T>(id, ctx, n, indices, values, out);
}

}  // namespace sluice
