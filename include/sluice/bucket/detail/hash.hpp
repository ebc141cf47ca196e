// Stable hashing and little-endian field I/O for layout serialization: the fingerprint must be
// identical on every rank, compiler and run. The implementation is core/serial.hpp.
#pragma once

#include <sluice/core/serial.hpp>

namespace sluice::detail::bucket {
using serial::put;
using serial::reader;
using serial::stable_hash;
}  // namespace sluice::detail::bucket
