// Concepts of bucket/: what layout::from accepts. Layouts and plans are concrete value types;
// the only open-ended input is the user's list of named gradient spans.
#pragma once

#include <cstddef>
#include <ranges>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <sluice/core/concepts.hpp>

namespace sluice {

/// A range of (name, span) pairs, e.g. std::vector<std::pair<std::string, std::span<float>>>:
/// the name converts to std::string_view and the span's value type is an Element.
template <class R>
concept NamedSpans = std::ranges::input_range<R> && requires(std::ranges::range_reference_t<R> entry) {
  requires std::convertible_to<decltype(std::get<0>(entry)), std::string_view>;
  requires Element<typename std::remove_cvref_t<decltype(std::get<1>(entry))>::value_type>;
  { std::get<1>(entry).size() } -> std::convertible_to<std::size_t>;
};

}  // namespace sluice
