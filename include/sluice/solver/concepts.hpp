// Solver vocabulary shared by the policies that the solver may choose: the auto_select
// placeholder (CUTLASS's StageCountAuto idea) and the CostModel concept a solver minimises.
#pragma once

#include <concepts>
#include <type_traits>

namespace sluice {

/// Placeholder for a policy field or template argument that the solver chooses at run time from
/// measured bandwidth (e.g. a compression ratio or a bucket byte cap).
struct auto_select {
  friend constexpr bool operator==(auto_select, auto_select) noexcept = default;
};

/// True when T is sluice::auto_select (cv-qualifiers ignored).
template <class T>
inline constexpr bool is_auto_select_v = std::is_same_v<std::remove_cv_t<T>, auto_select>;

/// A cost model predicts the seconds one training step takes under a candidate configuration,
/// given the measured environment. Requirements:
///  - `m.step_seconds(candidate, env)` is a pure function returning a finite, non-negative double
///    (seconds) for every candidate the solver enumerates; it never throws for such candidates.
template <class M, class Candidate, class Environment>
concept CostModel = requires(M const& m, Candidate const& c, Environment const& env) {
  { m.step_seconds(c, env) } -> std::convertible_to<double>;
};

}  // namespace sluice
