// Cache detection returns plausible sizes on this machine and parses sysfs formats.
#include <doctest/doctest.h>

#include <sluice/core/cache.hpp>

TEST_CASE("cache sizes are detected and plausible") {
  auto const& c = sluice::cache_sizes();
  MESSAGE("cache source=" << std::string(c.source) << " l1d=" << c.l1d << " l2=" << c.l2 << " l3=" << c.l3
                          << " l2_sharing=" << c.l2_sharing);
  CHECK(&c == &sluice::cache_sizes());
  CHECK(c.line >= 16);
  CHECK(c.line <= 256);
  CHECK(c.l2_per_core() >= 16 * 1024);
  if (c.l1d != 0) CHECK(c.l1d <= (std::size_t{4} << 20));
  if (c.l2 != 0 && c.l1d != 0) CHECK(c.l2 >= c.l1d);
}

TEST_CASE("sysfs size and cpu-list parsing") {
  CHECK(sluice::detail::parse_cache_size("32K") == 32 * 1024);
  CHECK(sluice::detail::parse_cache_size("1024K\n") == 1024 * 1024);
  CHECK(sluice::detail::parse_cache_size("32M") == 32u << 20);
  CHECK(sluice::detail::count_cpu_list("0-3,8-11") == 8);
  CHECK(sluice::detail::count_cpu_list("5") == 1);
  CHECK(sluice::detail::count_cpu_list("0,2,4-5") == 4);
}
