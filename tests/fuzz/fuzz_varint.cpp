// libFuzzer target for the delta-varint index decoder: any bytes, any count, any extent.
// Decoded lists must be strictly increasing and in range; anything else must be a clean error,
// and the same indices or the same error message as the plain byte loop (tests/core/varint_reference.hpp).
#include <cstdint>
#include <cstring>
#include <vector>

#include <sluice/core/varint.hpp>

#include "../core/varint_reference.hpp"

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size < 4) return 0;
  std::uint16_t count16;
  std::uint16_t extent16;
  std::memcpy(&count16, data, 2);
  std::memcpy(&extent16, data + 2, 2);
  std::size_t const count = count16 % 2048;
  std::size_t const extent = (data[0] & 0x80) != 0 ? (std::size_t{extent16} << 20) : extent16;
  std::vector<std::byte> in(size - 4);
  if (!in.empty()) std::memcpy(in.data(), data + 4, in.size());
  if (!sluice::test::decoders_agree<std::uint64_t>(in, extent, count)) __builtin_trap();
  if (!sluice::test::decoders_agree<std::uint32_t>(in, extent, count)) __builtin_trap();
  std::vector<std::uint64_t> out(count);
  try {
    sluice::wire::decode_sorted_indices<std::uint64_t>(in, extent, out);
    for (std::size_t j = 0; j < count; ++j) {
      if (out[j] >= extent) __builtin_trap();
      if (j > 0 && out[j] <= out[j - 1]) __builtin_trap();
    }
    // Re-encoding reproduces the canonical form of the same list.
    std::vector<std::byte> again(sluice::wire::max_index_bytes(count, extent));
    std::size_t const n = sluice::wire::encode_sorted_indices<std::uint64_t>(out, again);
    std::vector<std::uint64_t> back(count);
    sluice::wire::decode_sorted_indices<std::uint64_t>(std::span<std::byte const>(again.data(), n), extent, back);
    if (back != out) __builtin_trap();
  } catch (sluice::error const& e) {
    if (e.code() != sluice::errc::malformed_message) __builtin_trap();
  }
  return 0;
}
