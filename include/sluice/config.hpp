// Build configuration visible to code: which optional engines this build was configured with.
// The CMake targets define these; a consumer without CMake may define them by hand.
#pragma once

#if defined(_OPENMP)
#define SLUICE_HAS_OPENMP 1
#else
#define SLUICE_HAS_OPENMP 0
#endif

/// Restrict-qualified pointer spelling for hot loops (all supported compilers accept __restrict).
#define SLUICE_RESTRICT __restrict

namespace sluice {
/// True when parallel loops run on OpenMP threads; false when they run serially.
inline constexpr bool has_openmp = SLUICE_HAS_OPENMP != 0;
}  // namespace sluice
