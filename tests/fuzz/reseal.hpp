// Shared by the fuzz targets: re-seal a serial record after editing it, so that mutations reach
// the checks behind the checksum (a forger can compute it as well as the writer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <sluice/core/serial.hpp>

namespace sluice::fuzz {

/// Replaces the record's trailing checksum with the one of its bytes as they are now; a buffer
/// shorter than the trailer is left as it is.
inline void reseal(std::vector<std::byte>& b) {
  if (b.size() < serial::record_trailer_bytes) return;
  std::uint64_t const h = serial::stable_hash(std::span<std::byte const>(b.data(), b.size() - 8));
  std::memcpy(b.data() + b.size() - 8, &h, 8);
}

}  // namespace sluice::fuzz
