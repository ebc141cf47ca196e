// The bodies of core/cache.hpp: header-only, included at its end; with sluice::kernels, compiled
// there once.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

#include <unistd.h>

#if defined(SLUICE_HAVE_HWLOC)
#include <hwloc.h>
#endif

#include <sluice/core/cache.hpp>

namespace sluice {

namespace detail {

SLUICE_DECL std::size_t parse_cache_size(std::string const& s) noexcept {
  std::size_t value = 0, i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') value = value * 10 + static_cast<std::size_t>(s[i++] - '0');
  if (i < s.size() && (s[i] == 'K' || s[i] == 'k')) value <<= 10;
  if (i < s.size() && (s[i] == 'M' || s[i] == 'm')) value <<= 20;
  return value;
}

SLUICE_DECL unsigned count_cpu_list(std::string const& s) noexcept {
  unsigned count = 0;
  std::size_t i = 0;
  while (i < s.size()) {
    unsigned a = 0, b = 0;
    bool any = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') a = a * 10 + static_cast<unsigned>(s[i++] - '0'), any = true;
    b = a;
    if (i < s.size() && s[i] == '-') {
      ++i;
      b = 0;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') b = b * 10 + static_cast<unsigned>(s[i++] - '0');
    }
    if (any && b >= a) count += b - a + 1;
    while (i < s.size() && (s[i] < '0' || s[i] > '9')) ++i;
  }
  return count;
}

SLUICE_DECL bool read_sysfs(cache_info& info) {
  bool found = false;
  for (int index = 0; index < 8; ++index) {
    std::string const base = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_f(base + "level"), type_f(base + "type"), size_f(base + "size"),
        shared_f(base + "shared_cpu_list"), line_f(base + "coherency_line_size");
    if (!level_f || !type_f || !size_f) continue;
    int level = 0;
    std::string type, size, shared;
    level_f >> level;
    type_f >> type;
    size_f >> size;
    if (shared_f) shared_f >> shared;
    if (type == "Instruction") continue;
    std::size_t const bytes = parse_cache_size(size);
    unsigned const sharing = shared.empty() ? 1u : count_cpu_list(shared);
    if (line_f) {
      std::size_t line = 0;
      line_f >> line;
      if (line != 0) info.line = line;
    }
    if (level == 1) info.l1d = bytes;
    if (level == 2) info.l2 = bytes, info.l2_sharing = sharing == 0 ? 1 : sharing;
    if (level == 3) info.l3 = bytes, info.l3_sharing = sharing == 0 ? 1 : sharing;
    found = found || bytes != 0;
  }
  return found;
}

#if defined(SLUICE_HAVE_HWLOC)
SLUICE_DECL bool read_hwloc(cache_info& info) {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) return false;
  bool found = false;
  if (hwloc_topology_load(topo) == 0) {
    hwloc_obj_type_t const types[3] = {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE};
    for (int level = 0; level < 3; ++level) {
      hwloc_obj_t obj = hwloc_get_obj_by_type(topo, types[level], 0);
      if (obj == nullptr || obj->attr == nullptr) continue;
      auto const bytes = static_cast<std::size_t>(obj->attr->cache.size);
      int const pus = hwloc_bitmap_weight(obj->cpuset);
      unsigned const sharing = pus > 0 ? static_cast<unsigned>(pus) : 1u;
      if (obj->attr->cache.linesize > 0) info.line = static_cast<std::size_t>(obj->attr->cache.linesize);
      if (level == 0) info.l1d = bytes;
      if (level == 1) info.l2 = bytes, info.l2_sharing = sharing;
      if (level == 2) info.l3 = bytes, info.l3_sharing = sharing;
      found = found || bytes != 0;
    }
  }
  hwloc_topology_destroy(topo);
  return found;
}
#endif

SLUICE_DECL cache_info detect_cache_info() {
  cache_info info;
#if defined(SLUICE_HAVE_HWLOC)
  if (read_hwloc(info)) {
    info.source = "hwloc";
    return info;
  }
#endif
  if (read_sysfs(info)) {
    info.source = "sysfs";
    return info;
  }
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  long const l1 = ::sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE),
             l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE), line = ::sysconf(_SC_LEVEL1_DCACHE_LINESIZE);
  if (l1 > 0 || l2 > 0 || l3 > 0) {
    info.l1d = l1 > 0 ? static_cast<std::size_t>(l1) : 0;
    info.l2 = l2 > 0 ? static_cast<std::size_t>(l2) : 0;
    info.l3 = l3 > 0 ? static_cast<std::size_t>(l3) : 0;
    if (line > 0) info.line = static_cast<std::size_t>(line);
    info.source = "sysconf";
  }
#endif
  return info;
}

}  // namespace detail

SLUICE_DECL cache_info const& cache_sizes() {
  static cache_info const info = detail::detect_cache_info();
  return info;
}

}  // namespace sluice
