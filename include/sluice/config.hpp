// Build configuration visible to code: which optional engines this build was configured with.
// The CMake targets define these; a consumer without CMake may define them by hand.
#pragma once

#if defined(_OPENMP)
#define SLUICE_HAS_OPENMP 1
#else
#define SLUICE_HAS_OPENMP 0
#endif

/// How a function that is not a template is declared in sluice's headers. Header-only (the
/// default) it is `inline` and its body comes from the area's `impl/*.ipp`, included at the end of
/// its header. With SLUICE_SEPARATE_KERNELS (defined by linking sluice::kernels) it is an ordinary
/// function: the headers declare it and sluice::kernels defines it once (`<sluice/impl/src.hpp>`),
/// so a translation unit neither parses its body nor generates its code. A program links
/// sluice::kernels into every unit that includes sluice, or into none.
#if defined(SLUICE_SEPARATE_KERNELS)
#define SLUICE_DECL
#define SLUICE_HEADER_ONLY 0
#else
#define SLUICE_DECL inline
#define SLUICE_HEADER_ONLY 1
#endif

/// Restrict-qualified pointer spelling for hot loops (all supported compilers accept __restrict).
#define SLUICE_RESTRICT __restrict

namespace sluice {
/// True when parallel loops run on OpenMP threads; false when they run serially.
inline constexpr bool has_openmp = SLUICE_HAS_OPENMP != 0;
}  // namespace sluice
