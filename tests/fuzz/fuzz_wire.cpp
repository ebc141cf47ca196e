// libFuzzer target for the wire reader. Half of the inputs get a valid checksum stamped in before
// parsing, so the fuzzer explores the validation behind the checksum too.
#include <cstdint>
#include <cstring>
#include <vector>

#include <sluice/core/varint.hpp>
#include <sluice/core/wire.hpp>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size == 0) return 0;
  bool const reseal = (data[0] & 1) != 0;
  std::vector<std::byte> buf(size - 1);
  if (size > 1) std::memcpy(buf.data(), data + 1, size - 1);
  if (reseal && buf.size() >= sluice::wire::header_bytes) {
    std::uint64_t const sum = sluice::detail::wire::frame_checksum(buf);
    std::memcpy(buf.data() + 72, &sum, sizeof sum);
  }
  try {
    auto const f = sluice::wire::parse(buf);
    // A valid frame: every section must also be safe to read as an index list.
    std::size_t const extent = static_cast<std::size_t>(std::min<std::uint64_t>(f.head.extent, std::uint64_t{1} << 32));
    for (std::size_t i = 0; i < f.section_count; ++i) {
      std::vector<std::uint32_t> idx(std::min<std::size_t>(f.sections[i].size(), 4096));
      try {
        sluice::wire::decode_sorted_indices<std::uint32_t>(f.sections[i], extent, idx);
      } catch (sluice::error const& e) {
        if (e.code() != sluice::errc::malformed_message) __builtin_trap();
      }
    }
  } catch (sluice::error const& e) {
    if (e.code() != sluice::errc::malformed_message) __builtin_trap();
  }
  return 0;
}
