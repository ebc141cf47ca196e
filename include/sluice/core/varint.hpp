// Sorted index lists on the wire: the first index, then the gaps to each next index, each as an
// unsigned LEB128 varint. A gap of 0 (duplicate) or an index past the extent is malformed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <sluice/core/error.hpp>
#include <sluice/core/sparse.hpp>

namespace sluice::wire {

/// Most bytes one LEB128 varint of a 64-bit value takes.
inline constexpr std::size_t max_varint_bytes = 10;

/// Bytes `v` takes as LEB128.
constexpr std::size_t varint_size(std::uint64_t v) noexcept {
  std::size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}

/// Exact upper bound on the bytes encode_sorted_indices writes for `count` indices below `extent`
/// (every value fits in varint_size(extent - 1) bytes).
constexpr std::size_t max_index_bytes(std::size_t count, std::size_t extent) noexcept {
  return count * varint_size(extent == 0 ? 0 : static_cast<std::uint64_t>(extent - 1));
}

/// Writes strictly increasing indices as first value + gaps in LEB128. Returns bytes written.
/// Throws errc::size_mismatch if `out` is too small and errc::invalid_argument if the indices are
/// not strictly increasing; nothing past the returned length is touched.
template <SparseIndex Index>
std::size_t encode_sorted_indices(std::span<Index const> indices, std::span<std::byte> out) {
  std::size_t pos = 0;
  std::uint64_t prev = 0;
  std::byte* const o = out.data();
  std::size_t const cap = out.size();
  for (std::size_t j = 0; j < indices.size(); ++j) {
    std::uint64_t const v = indices[j];
    require(j == 0 || v > prev, errc::invalid_argument,
            "encode_sorted_indices: indices not strictly increasing at position {}", j);
    std::uint64_t gap = j == 0 ? v : v - prev;
    prev = v;
    if (cap - pos >= max_varint_bytes) [[likely]] {
      while (gap >= 0x80) {
        o[pos++] = static_cast<std::byte>((gap & 0x7f) | 0x80);
        gap >>= 7;
      }
      o[pos++] = static_cast<std::byte>(gap);
    } else {
      require(cap - pos >= varint_size(gap), errc::size_mismatch,
              "encode_sorted_indices: output of {} bytes is too small", cap);
      while (gap >= 0x80) {
        o[pos++] = static_cast<std::byte>((gap & 0x7f) | 0x80);
        gap >>= 7;
      }
      o[pos++] = static_cast<std::byte>(gap);
    }
  }
  return pos;
}

/// Decodes exactly `out.size()` indices from `in`, which must be consumed exactly. Validates
/// before writing each index: no truncated or over-long varint, no value past 64 bits, every gap
/// after the first >= 1 (strictly increasing, so no duplicates), every index < `extent`.
/// Throws errc::malformed_message saying what was wrong and where; `out` may then be partly written
/// (callers decode into scratch they own, never into user data, before validation completes).
template <SparseIndex Index>
void decode_sorted_indices(std::span<std::byte const> in, std::size_t extent, std::span<Index> out) {
  std::size_t pos = 0;
  std::uint64_t prev = 0;
  std::byte const* const p = in.data();
  std::size_t const n = in.size();
  for (std::size_t j = 0; j < out.size(); ++j) {
    std::uint64_t gap = 0;
    unsigned shift = 0;
    for (;;) {
      if (pos >= n) [[unlikely]]
        throw_error(errc::malformed_message, "index list truncated at index {} of {} (byte {})", j, out.size(), pos);
      auto const b = static_cast<std::uint8_t>(p[pos++]);
      if (shift == 63 && (b & 0x7e) != 0) [[unlikely]]
        throw_error(errc::malformed_message, "index varint overflows 64 bits at index {}", j);
      gap |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
      shift += 7;
      if (shift > 63) [[unlikely]]
        throw_error(errc::malformed_message, "index varint longer than {} bytes at index {}", max_varint_bytes, j);
    }
    if (j > 0 && gap == 0) [[unlikely]]
      throw_error(errc::malformed_message, "duplicate index {} at position {}", prev, j);
    std::uint64_t const v = j == 0 ? gap : prev + gap;
    if (v < prev || v >= extent) [[unlikely]]
      throw_error(errc::malformed_message, "index at position {} is out of range [0, {})", j, extent);
    out[j] = static_cast<Index>(v);
    prev = v;
  }
  if (pos != n) [[unlikely]]
    throw_error(errc::malformed_message, "index list has {} trailing bytes after {} indices", n - pos, out.size());
}

/// Checks a fixed-width index list read from a peer: strictly increasing and < extent.
/// Throws errc::malformed_message naming the first bad position.
template <SparseIndex Index>
void check_sorted_indices(std::span<Index const> indices, std::size_t extent) {
  for (std::size_t j = 0; j < indices.size(); ++j) {
    if (indices[j] >= extent) [[unlikely]]
      throw_error(errc::malformed_message, "index {} at position {} is out of range [0, {})",
                  static_cast<std::uint64_t>(indices[j]), j, extent);
    if (j > 0 && indices[j] <= indices[j - 1]) [[unlikely]]
      throw_error(errc::malformed_message, "indices unsorted or duplicate at position {} ({} after {})", j,
                  static_cast<std::uint64_t>(indices[j]), static_cast<std::uint64_t>(indices[j - 1]));
  }
}

}  // namespace sluice::wire
