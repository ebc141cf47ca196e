// The bucket loop of packed quantizers (sign, qsgd): per bucket, a few fp32 scales and one code of
// `bits` bits per element, tightly packed. Buckets are handed to threads in groups of 8, so every
// group starts on a byte boundary of the packed stream and threads never share a byte.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <sluice/compress/detail/pack.hpp>
#include <sluice/core/parallel.hpp>

namespace sluice::detail::compress {

/// Largest bucket the bucket loops handle (codes of one bucket live on the stack).
inline constexpr std::size_t max_bucket = 4096;

/// For every bucket b (elements [b*bucket, min(n, (b+1)*bucket))): f(first, len, codes) fills
/// codes[0, len) and returns the bucket's NF scales, stored at scales + 4*NF*b; the codes are
/// packed at bit first*bits of `packed` (packed_bytes(n, bits) bytes).
template <std::size_t NF, class F>
void encode_buckets(std::size_t n, std::size_t bucket, unsigned bits, std::byte* scales, std::byte* packed, F&& f) {
  std::size_t const nb = (n + bucket - 1) / bucket, groups = (nb + 7) / 8;
  bool const aligned = (bucket * bits) % 8 == 0;
  parallel_chunks(groups, 4, [&](std::size_t gb, std::size_t ge, int) {
    std::size_t const b0 = gb * 8, b1 = std::min(nb, ge * 8);
    if (!aligned) {
      std::size_t const from = b0 * bucket * bits / 8, to = packed_bytes(std::min(n, b1 * bucket), bits);
      std::memset(packed + from, 0, to - from);
    }
    std::array<std::uint8_t, max_bucket> codes;
    for (std::size_t b = b0; b < b1; ++b) {
      std::size_t const first = b * bucket, len = std::min(bucket, n - first);
      std::array<float, NF> const s = f(first, len, codes.data());
      std::memcpy(scales + 4 * NF * b, s.data(), 4 * NF);
      pack_codes_at(codes.data(), len, bits, packed, first * bits);
    }
  });
}

/// Inverse loop: g(first, len, scales, codes) for every bucket, codes unpacked.
template <std::size_t NF, class G>
void decode_buckets(std::size_t n, std::size_t bucket, unsigned bits, std::byte const* scales, std::byte const* packed,
                    G&& g) {
  std::size_t const nb = (n + bucket - 1) / bucket;
  parallel_chunks(nb, 32, [&](std::size_t bb, std::size_t be, int) {
    std::array<std::uint8_t, max_bucket> codes;
    for (std::size_t b = bb; b < be; ++b) {
      std::size_t const first = b * bucket, len = std::min(bucket, n - first);
      std::array<float, NF> s;
      std::memcpy(s.data(), scales + 4 * NF * b, 4 * NF);
      unpack_codes_at(packed, len, bits, first * bits, codes.data());
      g(first, len, s, codes.data());
    }
  });
}

}  // namespace sluice::detail::compress
