// Core concepts: Element (the value types sluice computes on) and SparseIndex (index widths).
// Light on purpose: the 16-bit types come from core/float16.hpp (no Eigen), so every concept
// header can state its requirements cheaply (core/element.hpp has the conversions).
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>

#include <sluice/core/float16.hpp>

namespace sluice {

/// One of float, sluice::half, sluice::bfloat16 (cv-qualifiers ignored).
template <class T>
concept Element = std::same_as < std::remove_cv_t<T>,
float > || std::same_as<std::remove_cv_t<T>, half> || std::same_as<std::remove_cv_t<T>, bfloat16>;

/// Index types a sparse_view may use: uint32_t (tensors up to 2^32 elements) or uint64_t.
template <class I>
concept SparseIndex = std::same_as<I, std::uint32_t> || std::same_as<I, std::uint64_t>;

}  // namespace sluice
