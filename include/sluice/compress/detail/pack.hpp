// Tight bit packing of small integer codes (1-8 bits each): code i occupies bits [i*b, (i+1)*b)
// of a little-endian bit stream, as in CGX's packed buckets. Groups of 8 codes fill exactly b
// bytes, so byte-aligned runs pack and unpack without read-modify-write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sluice::detail::compress {

/// Bytes that `count` codes of `bits` bits occupy.
constexpr std::size_t packed_bytes(std::size_t count, unsigned bits) noexcept { return (count * bits + 7) / 8; }

template <unsigned B>
inline void pack_fixed(std::uint8_t const* codes, std::size_t len, std::byte* out) noexcept {
  std::size_t i = 0;
  if constexpr (B == 8) {
    std::memcpy(out, codes, len);
    return;
  } else if constexpr (B == 4) {
    // Two codes per byte. SSE2: GCC leaves the byte-pair loop scalar, and at 4 bits this packing
    // was a quarter of maxmin_quantize's encode time.
    std::uint8_t* o = reinterpret_cast<std::uint8_t*>(out);
#if defined(__SSE2__)
    __m128i const lo = _mm_set1_epi16(0x00ff), hi = _mm_set1_epi16(0x00f0);
    for (; i + 32 <= len; i += 32) {
      __m128i const a = _mm_loadu_si128(reinterpret_cast<__m128i const*>(codes + i));
      __m128i const b = _mm_loadu_si128(reinterpret_cast<__m128i const*>(codes + i + 16));
      __m128i const pa = _mm_or_si128(_mm_and_si128(a, lo), _mm_and_si128(_mm_srli_epi16(a, 4), hi));
      __m128i const pb = _mm_or_si128(_mm_and_si128(b, lo), _mm_and_si128(_mm_srli_epi16(b, 4), hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i / 2), _mm_packus_epi16(pa, pb));
    }
#endif
    for (; i + 2 <= len; i += 2) o[i / 2] = static_cast<std::uint8_t>(codes[i] | (codes[i + 1] << 4));
    if (i < len) o[i / 2] = codes[i];
    return;
  }
  for (; i + 8 <= len; i += 8, out += B) {
    std::uint64_t w = 0;
    for (unsigned j = 0; j < 8; ++j) w |= static_cast<std::uint64_t>(codes[i + j]) << (j * B);
    std::memcpy(out, &w, B);
  }
  if (i < len) {
    std::uint64_t w = 0;
    for (unsigned j = 0; i + j < len; ++j) w |= static_cast<std::uint64_t>(codes[i + j]) << (j * B);
    std::memcpy(out, &w, packed_bytes(len - i, B));
  }
}

template <unsigned B>
inline void unpack_fixed(std::byte const* in, std::size_t len, std::uint8_t* codes) noexcept {
  constexpr std::uint64_t mask = (std::uint64_t{1} << B) - 1;
  std::size_t i = 0;
  for (; i + 8 <= len; i += 8, in += B) {
    std::uint64_t w = 0;
    std::memcpy(&w, in, B);
    for (unsigned j = 0; j < 8; ++j) codes[i + j] = static_cast<std::uint8_t>((w >> (j * B)) & mask);
  }
  if (i < len) {
    std::uint64_t w = 0;
    std::memcpy(&w, in, packed_bytes(len - i, B));
    for (unsigned j = 0; i + j < len; ++j) codes[i + j] = static_cast<std::uint8_t>((w >> (j * B)) & mask);
  }
}

/// Packs len codes of `bits` bits (1..8, each < 2^bits) starting at byte `out`, bit 0. Writes
/// exactly packed_bytes(len, bits) bytes; bits past the last code in the last byte are zero.
inline void pack_codes(std::uint8_t const* codes, std::size_t len, unsigned bits, std::byte* out) noexcept {
  switch (bits) {
    case 1:
      return pack_fixed<1>(codes, len, out);
    case 2:
      return pack_fixed<2>(codes, len, out);
    case 3:
      return pack_fixed<3>(codes, len, out);
    case 4:
      return pack_fixed<4>(codes, len, out);
    case 5:
      return pack_fixed<5>(codes, len, out);
    case 6:
      return pack_fixed<6>(codes, len, out);
    case 7:
      return pack_fixed<7>(codes, len, out);
    default:
      return pack_fixed<8>(codes, len, out);
  }
}

/// Inverse of pack_codes.
inline void unpack_codes(std::byte const* in, std::size_t len, unsigned bits, std::uint8_t* codes) noexcept {
  switch (bits) {
    case 1:
      return unpack_fixed<1>(in, len, codes);
    case 2:
      return unpack_fixed<2>(in, len, codes);
    case 3:
      return unpack_fixed<3>(in, len, codes);
    case 4:
      return unpack_fixed<4>(in, len, codes);
    case 5:
      return unpack_fixed<5>(in, len, codes);
    case 6:
      return unpack_fixed<6>(in, len, codes);
    case 7:
      return unpack_fixed<7>(in, len, codes);
    default:
      return unpack_fixed<8>(in, len, codes);
  }
}

/// Packs codes starting at an arbitrary bit offset of `out` by OR-ing into bytes that must start
/// zeroed (runs whose start is not byte-aligned: bucket sizes that are not a multiple of 8).
inline void pack_codes_at(std::uint8_t const* codes, std::size_t len, unsigned bits, std::byte* out,
                          std::size_t bit_offset) noexcept {
  if (bit_offset % 8 == 0) {
    // The first byte may already hold nothing (zeroed); pack_codes overwrites whole bytes.
    return pack_codes(codes, len, bits, out + bit_offset / 8);
  }
  for (std::size_t i = 0; i < len; ++i) {
    std::size_t const p = bit_offset + i * bits;
    unsigned const v = static_cast<unsigned>(codes[i]) << (p % 8);
    out[p / 8] |= static_cast<std::byte>(v & 0xffu);
    if ((p % 8) + bits > 8) out[p / 8 + 1] |= static_cast<std::byte>(v >> 8);
  }
}

/// Inverse of pack_codes_at (no zeroing needed).
inline void unpack_codes_at(std::byte const* in, std::size_t len, unsigned bits, std::size_t bit_offset,
                            std::uint8_t* codes) noexcept {
  if (bit_offset % 8 == 0) return unpack_codes(in + bit_offset / 8, len, bits, codes);
  unsigned const mask = (1u << bits) - 1;
  for (std::size_t i = 0; i < len; ++i) {
    std::size_t const p = bit_offset + i * bits;
    unsigned v = static_cast<unsigned>(in[p / 8]) >> (p % 8);
    if ((p % 8) + bits > 8) v |= static_cast<unsigned>(in[p / 8 + 1]) << (8 - p % 8);
    codes[i] = static_cast<std::uint8_t>(v & mask);
  }
}

}  // namespace sluice::detail::compress
