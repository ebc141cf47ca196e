// Solver vocabulary: the auto_select placeholder (CUTLASS's StageCountAuto idea), choice<T> (a
// configuration field that is either fixed by the user or left to the solver) and the CostModel
// concept a solver minimises.
#pragma once

#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>

#include <sluice/core/error.hpp>

namespace sluice {

/// Placeholder for a policy field or template argument that the solver chooses at run time from
/// measured bandwidth (e.g. a compression ratio or a bucket byte cap).
struct auto_select {
  friend constexpr bool operator==(auto_select, auto_select) noexcept = default;
};

/// True when T is sluice::auto_select (cv-qualifiers ignored).
template <class T>
inline constexpr bool is_auto_select_v = std::is_same_v<std::remove_cv_t<T>, auto_select>;

/// A configuration field: either a value the user fixed or sluice::auto_select (the default),
/// which the solver fills in. `choice<double> r = 0.01;` fixes, `choice<double> r = auto_select{};`
/// (or `{}`) leaves it to the solver.
template <class T>
class choice {
 public:
  constexpr choice() = default;
  constexpr choice(auto_select) noexcept {}  // NOLINT: implicit by design
  constexpr choice(T v) noexcept(std::is_nothrow_move_constructible_v<T>) : v_(std::move(v)) {}  // NOLINT
  /// Fixes the field from anything T is constructible from (`want.codec = sluice::top_k{.ratio = 0.01};`).
  template <class U>
  requires(!std::is_same_v<std::remove_cvref_t<U>, T> && !std::is_same_v<std::remove_cvref_t<U>, auto_select> &&
           !std::is_same_v<std::remove_cvref_t<U>, choice> && std::is_constructible_v<T, U&&>) constexpr choice(U&& v)
      : v_(std::in_place, std::forward<U>(v)) {}  // NOLINT: implicit by design

  /// True when the solver chooses this field.
  [[nodiscard]] constexpr bool is_auto() const noexcept { return !v_.has_value(); }
  /// The fixed value, or nullptr when the field is auto_select.
  [[nodiscard]] constexpr T const* fixed() const noexcept { return v_ ? &*v_ : nullptr; }
  /// The fixed value; errc::invalid_argument when the field is auto_select.
  [[nodiscard]] T const& value() const {
    require(v_.has_value(), errc::invalid_argument, "choice: the field is auto_select; run the solver to fill it in");
    return *v_;
  }

  friend constexpr bool operator==(choice const&, choice const&) = default;

 private:
  std::optional<T> v_{};
};

/// A cost model predicts the seconds one training step takes under a candidate configuration,
/// given the measured environment. Requirements:
///  - `m.step_seconds(candidate, env)` is a pure function returning a finite, non-negative double
///    (seconds) for every candidate the solver enumerates; it never throws for such candidates.
template <class M, class Candidate, class Environment>
concept CostModel = requires(M const& m, Candidate const& c, Environment const& env) {
  { m.step_seconds(c, env) } -> std::convertible_to<double>;
};

}  // namespace sluice
