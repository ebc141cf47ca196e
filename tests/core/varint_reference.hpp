// The delta-varint index decoder as one byte loop (the library's before it read whole words), for
// tests and fuzzers that check the word paths raise the same errors with the same messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <sluice/core/error.hpp>
#include <sluice/core/varint.hpp>

namespace sluice::test {

template <class Index>
void reference_decode_sorted_indices(std::span<std::byte const> in, std::size_t extent, std::span<Index> out) {
  // Indices must fit Index: the extent is capped at its range (as the library caps it).
  if constexpr (sizeof(Index) < sizeof(std::uint64_t))
    if (extent > std::uint64_t{std::numeric_limits<Index>::max()} + 1)
      extent = static_cast<std::size_t>(std::uint64_t{std::numeric_limits<Index>::max()} + 1);
  std::size_t pos = 0;
  std::uint64_t prev = 0;
  std::byte const* const p = in.data();
  std::size_t const n = in.size();
  for (std::size_t j = 0; j < out.size(); ++j) {
    std::uint64_t gap = 0;
    unsigned shift = 0;
    for (;;) {
      if (pos >= n)
        throw_error(errc::malformed_message, "index list truncated at index {} of {} (byte {})", j, out.size(), pos);
      auto const b = static_cast<std::uint8_t>(p[pos++]);
      if (shift == 63 && (b & 0x7e) != 0)
        throw_error(errc::malformed_message, "index varint overflows 64 bits at index {}", j);
      gap |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
      shift += 7;
      if (shift > 63)
        throw_error(errc::malformed_message, "index varint longer than {} bytes at index {}", wire::max_varint_bytes,
                    j);
    }
    if (j > 0 && gap == 0) throw_error(errc::malformed_message, "duplicate index {} at position {}", prev, j);
    std::uint64_t const v = j == 0 ? gap : prev + gap;
    if (v < prev || v >= extent)
      throw_error(errc::malformed_message, "index at position {} is out of range [0, {})", j, extent);
    out[j] = static_cast<Index>(v);
    prev = v;
  }
  if (pos != n)
    throw_error(errc::malformed_message, "index list has {} trailing bytes after {} indices", n - pos, out.size());
}

/// Decodes `in` with the library and with the reference; true when both give the same indices or
/// both throw errc::malformed_message with the same message.
template <class Index>
bool decoders_agree(std::span<std::byte const> in, std::size_t extent, std::size_t count) {
  std::vector<Index> a(count), b(count);
  std::string ea, eb;
  try {
    wire::decode_sorted_indices<Index>(in, extent, a);
  } catch (error const& e) {
    if (e.code() != errc::malformed_message) return false;
    ea = e.what();
  }
  try {
    reference_decode_sorted_indices<Index>(in, extent, std::span<Index>(b));
  } catch (error const& e) {
    eb = e.what();
  }
  return ea == eb && (!ea.empty() || a == b);
}

}  // namespace sluice::test
