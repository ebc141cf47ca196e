// A base for the fmt::formatter of a sluice type printed as a name or a number with the caller's
// format spec ("{:>8}", "{:.3f}"), on <fmt/core.h> alone. fmt 9 declares formatter<string_view>
// and formatter<double> in core.h but defines their format() in <fmt/format.h> (about twice
// core.h's parse time), so a formatter derived from them makes every header that declares one
// include format.h. This one keeps the spec text from parse() and formats the value through
// fmt::format_to with the spec put back around it; fmt checks the spec when formatting (a bad
// spec throws fmt::format_error there, not at compile time). Nested replacement fields in the
// spec ("{:{}}") are rejected.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <fmt/core.h>

namespace sluice::detail {

struct spec_formatter {
  std::string_view spec;  ///< the text between ':' and '}', in the format string

  constexpr auto parse(fmt::format_parse_context& ctx) -> decltype(ctx.begin()) {
    auto it = ctx.begin();
    auto const first = it;
    while (it != ctx.end() && *it != '}') {
      if (*it == '{') ctx.on_error("sluice: nested replacement fields are not supported in this spec");
      ++it;
    }
    spec = std::string_view(first, static_cast<std::size_t>(it - first));
    return it;
  }

  /// Formats v with the stored spec.
  template <class V, class Ctx>
  auto format_with_spec(V const& v, Ctx& ctx) const -> decltype(ctx.out()) {
    if (spec.empty()) return fmt::format_to(ctx.out(), "{}", v);
    std::string f;
    f.reserve(spec.size() + 3);
    f.append("{:").append(spec).push_back('}');
    return fmt::format_to(ctx.out(), fmt::runtime(f), v);
  }
};

}  // namespace sluice::detail
