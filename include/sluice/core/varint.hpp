// Sorted index lists on the wire: the first index, then the gaps to each next index, each as an
// unsigned LEB128 varint. A gap of 0 (duplicate) or an index past the extent is malformed.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

#include <sluice/core/error.hpp>
#include <sluice/core/simd.hpp>
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

/// The value of the LEB128 varint that starts in the low byte of `w` (8 input bytes, little-endian)
/// and ends in the byte whose bit 7 is the lowest set bit of `stop` (= ~w & 0x80...80, non-zero):
/// the bytes past it masked off, the continuation bits dropped and the 7-bit groups moved together
/// in three steps (pairs, quads, the whole word), with no branch on the length.
constexpr std::uint64_t varint_in_word(std::uint64_t w, std::uint64_t stop) noexcept {
  std::uint64_t g = w & (stop ^ (stop - 1)) & 0x7f7f7f7f7f7f7f7fu;
  g = (g & 0x007f007f007f007fu) | ((g >> 1) & 0x3f803f803f803f80u);
  g = (g & 0x00003fff00003fffu) | ((g >> 2) & 0x0fffc0000fffc000u);
  g = (g & 0x000000000fffffffu) | ((g >> 4) & 0x00fffffff0000000u);
  return g;
}

/// The value of a varint of 1 or 2 bytes in the low bytes of `x` (byte 1 counts when byte 0 has
/// its continuation bit): (x & 0x80) << 7 minus itself is the mask 0x3f80 or 0.
constexpr std::uint64_t short_varint(std::uint64_t x) noexcept {
  std::uint64_t const c = x & 0x80;
  return (x & 0x7f) | ((x >> 1) & ((c << 7) - c));
}

/// Reads the varint of index j (of `count`) at p[pos], byte by byte, and advances pos past it;
/// throws errc::malformed_message when it is truncated, overflows 64 bits or is too long. Kept out
/// of line: the decoder's word paths keep their values in registers.
struct varint_read {
  std::uint64_t value;
  std::size_t end;  ///< the byte after the varint
};
[[gnu::noinline]] inline varint_read read_varint(std::byte const* p, std::size_t n, std::size_t pos, std::size_t j,
                                                 std::size_t count) {
  std::uint64_t gap = 0;
  unsigned shift = 0;
  for (;;) {
    if (pos >= n) [[unlikely]]
      throw_error(errc::malformed_message, "index list truncated at index {} of {} (byte {})", j, count, pos);
    auto const b = static_cast<std::uint8_t>(p[pos++]);
    if (shift == 63 && (b & 0x7e) != 0) [[unlikely]]
      throw_error(errc::malformed_message, "index varint overflows 64 bits at index {}", j);
    gap |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return {gap, pos};
    shift += 7;
    if (shift > 63) [[unlikely]]
      throw_error(errc::malformed_message, "index varint longer than {} bytes at index {}", max_varint_bytes, j);
  }
}

/// Decodes exactly `out.size()` indices from `in`, which must be consumed exactly. Validates
/// before writing each index: no truncated or over-long varint, no value past 64 bits, every gap
/// after the first >= 1 (strictly increasing, so no duplicates), every index < `extent`.
/// Throws errc::malformed_message saying what was wrong and where; `out` may then be partly written
/// (callers decode into scratch they own, never into user data, before validation completes).
///
/// Gaps of top_k lists take 1 or 2 bytes at random, where a byte loop's continuation branch
/// mispredicts, and each varint's start waits on the previous one's length. So, while 8 input
/// bytes remain: when none of them has a continuation bit, they are eight 1-byte gaps; else when
/// four varints of 1 or 2 bytes (gaps below 2^14) end within them, all four are taken from that
/// one load (their ends are the four lowest clear continuation bits); either is kept if every gap
/// is >= 1 and the last index is in range. Otherwise one varint that ends within the 8 bytes is
/// taken from them. Near the end of the input, for varints of 9 or 10 bytes, and for the index a
/// check fails at, the byte loop runs: every error is raised by the same code at the same index
/// and byte as by a byte loop alone.
template <SparseIndex Index>
[[gnu::always_inline]] inline void decode_sorted_indices_body(std::span<std::byte const> in, std::size_t extent,
                                                              std::span<Index> out) {
  std::size_t pos = 0;
  std::uint64_t prev = 0;
  std::byte const* const p = in.data();
  std::size_t const n = in.size();
  std::size_t const count = out.size();
  Index* const o = out.data();
  constexpr bool little = std::endian::native == std::endian::little;
  constexpr std::uint64_t continuation = 0x8080808080808080u;
  std::size_t j = 0;
  while (j < count) {
    std::uint64_t w = 0, stop = 0;
    if (little && n - pos >= 8) {
      std::memcpy(&w, p + pos, 8);
      std::uint64_t const more = w & continuation;
      stop = more ^ continuation;
      if (more == 0 && j != 0 && count - j >= 8) {
        // Eight 1-byte varints (dense stretches of a list: gaps below 2^7). A zero byte is a
        // duplicate; the byte path finds which.
        std::uint64_t v = prev;
        for (unsigned q = 0; q < 8; ++q) {
          v += (w >> (8 * q)) & 0xff;
          o[j + q] = static_cast<Index>(v);
        }
        bool const zero = ((w - 0x0101010101010101u) & ~w & continuation) != 0;
        if (!zero & (v > prev) & (v < extent)) [[likely]] {
          prev = v;
          j += 8;
          pos += 8;
          continue;
        }
      }
      std::uint64_t const s1 = stop & (stop - 1), s2 = s1 & (s1 - 1), s3 = s2 & (s2 - 1);
      // Four varints end in these bytes (the first three before byte 7, so no shift is 64), and
      // none of them has two continuation bytes in a row: all four are 1 or 2 bytes long.
      if (s3 != 0 && (more & (more << 8) & (s3 ^ (s3 - 1))) == 0 && j != 0 && count - j >= 4) {
        auto const e0 = static_cast<unsigned>(std::countr_zero(stop) + 1);
        auto const e1 = static_cast<unsigned>(std::countr_zero(s1) + 1);
        auto const e2 = static_cast<unsigned>(std::countr_zero(s2) + 1);
        std::uint64_t const g0 = short_varint(w), g1 = short_varint(w >> e0), g2 = short_varint(w >> e1),
                            g3 = short_varint(w >> e2);
        std::uint64_t const v0 = prev + g0, v1 = v0 + g1, v2 = v1 + g2, v3 = v2 + g3;
        // Each gap < 2^14: v3 > prev unless the sum wrapped past 2^64.
        bool const ok = (g0 != 0) & (g1 != 0) & (g2 != 0) & (g3 != 0) & (v3 > prev) & (v3 < extent);
        if (ok) [[likely]] {
          o[j] = static_cast<Index>(v0);
          o[j + 1] = static_cast<Index>(v1);
          o[j + 2] = static_cast<Index>(v2);
          o[j + 3] = static_cast<Index>(v3);
          prev = v3;
          j += 4;
          pos += static_cast<std::size_t>(std::countr_zero(s3) >> 3) + 1;
          continue;
        }
      }
    }
    std::uint64_t gap = 0;
    if (stop != 0) {
      gap = varint_in_word(w, stop);
      pos += static_cast<std::size_t>(std::countr_zero(stop) >> 3) + 1;
    } else {
      auto const r = read_varint(p, n, pos, j, count);
      gap = r.value;
      pos = r.end;
    }
    // Copies into the messages (static_cast), so that no counter's address escapes the loop.
    if (j > 0 && gap == 0) [[unlikely]]
      throw_error(errc::malformed_message, "duplicate index {} at position {}", static_cast<std::uint64_t>(prev),
                  static_cast<std::size_t>(j));
    std::uint64_t const v = j == 0 ? gap : prev + gap;
    if (v < prev || v >= extent) [[unlikely]]
      throw_error(errc::malformed_message, "index at position {} is out of range [0, {})", static_cast<std::size_t>(j),
                  static_cast<std::size_t>(extent));
    o[j] = static_cast<Index>(v);
    prev = v;
    ++j;
  }
  if (pos != n) [[unlikely]]
    throw_error(errc::malformed_message, "index list has {} trailing bytes after {} indices", n - pos, count);
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
/// decode_sorted_indices_body compiled with BMI1/BMI2 (andn, blsr, tzcnt and shrx where the x86-64
/// baseline moves registers and shifts through cl; about 7% faster on BM_varint_decode, Zen 5);
/// chosen when the CPU has them and SLUICE_SIMD allows AVX2.
template <SparseIndex Index>
__attribute__((target("bmi,bmi2"))) void decode_sorted_indices_bmi2(std::span<std::byte const> in, std::size_t extent,
                                                                    std::span<Index> out) {
  decode_sorted_indices_body(in, extent, out);
}
#endif

/// Decodes exactly `out.size()` indices from `in` (decode_sorted_indices_body); errc::malformed_message
/// on any malformed list, including an index that does not fit Index (the extent is capped at
/// Index's range, so a 32-bit list never truncates an index of 2^32 or more).
template <SparseIndex Index>
void decode_sorted_indices(std::span<std::byte const> in, std::size_t extent, std::span<Index> out) {
  if constexpr (sizeof(Index) < sizeof(std::uint64_t)) {
    constexpr std::uint64_t cap = std::uint64_t{std::numeric_limits<Index>::max()} + 1;
    if (extent > cap) extent = static_cast<std::size_t>(cap);
  }
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  if (use_bmi2()) return decode_sorted_indices_bmi2(in, extent, out);
#endif
  decode_sorted_indices_body(in, extent, out);
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
