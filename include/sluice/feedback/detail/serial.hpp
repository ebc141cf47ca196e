// Little-endian field I/O and a stable hash for feedback checkpoints (bytes that outlive the run).
// The implementation is core/serial.hpp.
#pragma once

#include <sluice/core/serial.hpp>

namespace sluice::detail::feedback {
using serial::append;
using serial::put;
using serial::reader;
using serial::stable_hash;
}  // namespace sluice::detail::feedback
