// sluice version, as a macro for preprocessor checks and as constants for code.
#pragma once

#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 1
#define SLUICE_VERSION_PATCH 0
/// MAJOR * 10000 + MINOR * 100 + PATCH
#define SLUICE_VERSION (SLUICE_VERSION_MAJOR * 10000 + SLUICE_VERSION_MINOR * 100 + SLUICE_VERSION_PATCH)

namespace sluice {
inline constexpr int version_major = SLUICE_VERSION_MAJOR;
inline constexpr int version_minor = SLUICE_VERSION_MINOR;
inline constexpr int version_patch = SLUICE_VERSION_PATCH;
inline constexpr char const* version_string = "0.1.0";
}  // namespace sluice
