// The integers of a range as "a, b, c": what fmt::join(r, ", ") prints, without <fmt/format.h>
// and <fmt/ranges.h>, which would double what a unit including sluice parses.
#pragma once

#include <string>

namespace sluice::detail {

template <class Range>
[[nodiscard]] std::string decimal_list(Range const& values) {
  std::string s;
  bool first = true;
  for (auto const v : values) {
    if (!first) s += ", ";
    first = false;
    s += std::to_string(v);
  }
  return s;
}

}  // namespace sluice::detail
