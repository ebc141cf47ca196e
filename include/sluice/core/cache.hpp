// Data-cache sizes of this machine, per level: hwloc when sluice was configured with it
// (SLUICE_HAVE_HWLOC), otherwise sysconf and /sys/devices/system/cpu. Used to size chunks.
#pragma once

#include <cstddef>
#include <string>

#include <sluice/config.hpp>

namespace sluice {

/// Data-cache geometry in bytes. A level that could not be detected is 0.
struct cache_info {
  std::size_t line = 64;           ///< bytes per cache line
  std::size_t l1d = 0;             ///< L1 data cache of one core, bytes
  std::size_t l2 = 0;              ///< one L2 instance, bytes
  std::size_t l3 = 0;              ///< one L3 instance, bytes
  unsigned l2_sharing = 1;         ///< logical CPUs sharing one L2 instance
  unsigned l3_sharing = 1;         ///< logical CPUs sharing one L3 instance
  char const* source = "default";  ///< "hwloc", "sysfs", "sysconf" or "default"

  /// L2 bytes available to one logical CPU, or a 256 KiB default when unknown.
  [[nodiscard]] std::size_t l2_per_core() const noexcept {
    return l2 == 0 ? std::size_t{256} << 10 : l2 / (l2_sharing == 0 ? 1 : l2_sharing);
  }
  friend bool operator==(cache_info const&, cache_info const&) = default;
};

namespace detail {
SLUICE_DECL std::size_t parse_cache_size(std::string const& s) noexcept;  ///< "32K", "1024K", "32M"
SLUICE_DECL unsigned count_cpu_list(std::string const& s) noexcept;       ///< "0-3,8-11" -> 8
SLUICE_DECL bool read_sysfs(cache_info& info);
#if defined(SLUICE_HAVE_HWLOC)
SLUICE_DECL bool read_hwloc(cache_info& info);
#endif
SLUICE_DECL cache_info detect_cache_info();
}  // namespace detail

/// The cache geometry of this machine, detected once (thread-safe) and cached.
SLUICE_DECL cache_info const& cache_sizes();

}  // namespace sluice

#if SLUICE_HEADER_ONLY
#include <sluice/core/impl/cache.ipp>
#endif
