// Core concepts: Element (the value types sluice computes on) and SparseIndex (index widths).
// Declaration-light on purpose: Eigen's 16-bit types are only named here, so every concept
// header can state its requirements without paying for <Eigen/Core> (core/element.hpp has them).
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>

namespace Eigen {
struct half;
struct bfloat16;
}  // namespace Eigen

namespace sluice {

/// One of float, Eigen::half, Eigen::bfloat16 (cv-qualifiers ignored).
template <class T>
concept Element = std::same_as < std::remove_cv_t<T>,
float > || std::same_as<std::remove_cv_t<T>, Eigen::half> || std::same_as<std::remove_cv_t<T>, Eigen::bfloat16>;

/// Index types a sparse_view may use: uint32_t (tensors up to 2^32 elements) or uint64_t.
template <class I>
concept SparseIndex = std::same_as<I, std::uint32_t> || std::same_as<I, std::uint64_t>;

}  // namespace sluice
