// The products of PowerSGD's subspace step on a row-major rows x cols matrix M and rank r, with
// the factors held transposed (r x rows and r x cols, so that every inner loop is contiguous):
// P^T = (M Q)^T, Q^T = (M^T P)^T, and M' = P Q^T. r is small (1-16 in practice, at most 1024), so
// each is a pass over M that reads it once from memory and r times from L1: the pass is bound by
// M's bytes, not by arithmetic, and no blocked GEMM is needed. Every sum runs in one fixed order
// (16 lane-wise partial sums, then a fixed tree; M' adds four rows of Q^T at a time), so every rank and every
// instruction-set level computes the same bits.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include <sluice/config.hpp>

namespace sluice::detail::compress {

inline constexpr std::size_t low_rank_lanes = 16;

/// sum_j a[j] * b[j]: lane l takes j = l (mod 16), then the lanes are added in a fixed tree.
inline float dot(float const* SLUICE_RESTRICT a, float const* SLUICE_RESTRICT b, std::size_t n) noexcept {
  constexpr std::size_t L = low_rank_lanes;
  float acc[L] = {};
  std::size_t j = 0;
  for (; j + L <= n; j += L)
    for (std::size_t l = 0; l < L; ++l) acc[l] += a[j + l] * b[j + l];
  for (std::size_t l = 0; j < n; ++j, ++l) acc[l] += a[j] * b[j];
  for (std::size_t w = L / 2; w != 0; w /= 2)
    for (std::size_t l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

/// dot(a, b, n), and amax = the largest |a[j]| seen so far (NaN skipped), in the same pass.
inline float dot_amax(float const* SLUICE_RESTRICT a, float const* SLUICE_RESTRICT b, std::size_t n,
                      float& amax) noexcept {
  constexpr std::size_t L = low_rank_lanes;
  float acc[L] = {}, mx[L] = {};
  std::size_t j = 0;
  for (; j + L <= n; j += L)
    for (std::size_t l = 0; l < L; ++l) {
      float const v = a[j + l], x = std::abs(v);
      acc[l] += v * b[j + l];
      mx[l] = x > mx[l] ? x : mx[l];
    }
  for (std::size_t l = 0; j < n; ++j, ++l) {
    float const x = std::abs(a[j]);
    acc[l] += a[j] * b[j];
    mx[l] = x > mx[l] ? x : mx[l];
  }
  for (std::size_t w = L / 2; w != 0; w /= 2)
    for (std::size_t l = 0; l < w; ++l) {
      acc[l] += acc[l + w];
      mx[l] = mx[l + w] > mx[l] ? mx[l + w] : mx[l];
    }
  amax = mx[0] > amax ? mx[0] : amax;
  return acc[0];
}

/// y[j] += a * x[j].
inline void axpy(float a, float const* SLUICE_RESTRICT x, float* SLUICE_RESTRICT y, std::size_t n) noexcept {
  for (std::size_t j = 0; j < n; ++j) y[j] += a * x[j];
}

/// y[j] += sum_k c[k] * x[k][j], k in order, for K rows x[k] at once (y is read and written once).
template <std::size_t K>
inline void combine(float const* c, float const* const* x, float* SLUICE_RESTRICT y, std::size_t n) noexcept {
  for (std::size_t j = 0; j < n; ++j) {
    float v = y[j];
    for (std::size_t k = 0; k < K; ++k) v += c[k] * x[k][j];
    y[j] = v;
  }
}

/// Calls f(std::integral_constant<size_t, K>, k0) for the rank's groups k0 = 0, 4, 8, ... of K = 4
/// rows, the last group of r mod 4 rows.
template <class F>
inline void in_groups_of_four(std::size_t r, F&& f) {
  std::size_t k = 0;
  for (; k + 4 <= r; k += 4) f(std::integral_constant<std::size_t, 4>{}, k);
  switch (r - k) {
    case 3:
      f(std::integral_constant<std::size_t, 3>{}, k);
      break;
    case 2:
      f(std::integral_constant<std::size_t, 2>{}, k);
      break;
    case 1:
      f(std::integral_constant<std::size_t, 1>{}, k);
      break;
    default:
      break;
  }
}

/// pt[k * rows + i] = <m row i, qt row k>: P^T = (M Q)^T. Returns the largest |m| (NaN skipped),
/// found in the same pass.
inline float project_rows(float const* m, std::size_t rows, std::size_t cols, float const* qt, std::size_t r,
                          float* pt) noexcept {
  float amax = 0.0f;
  for (std::size_t i = 0; i < rows; ++i) {
    pt[i] = dot_amax(m + i * cols, qt, cols, amax);
    for (std::size_t k = 1; k < r; ++k) pt[k * rows + i] = dot(m + i * cols, qt + k * cols, cols);
  }
  return amax;
}

/// qt = (M^T P)^T: qt row k = sum_i pt[k * rows + i] * (m row i), rows in order.
inline void project_cols(float const* m, std::size_t rows, std::size_t cols, float const* pt, std::size_t r,
                         float* qt) noexcept {
  for (std::size_t x = 0; x < r * cols; ++x) qt[x] = 0.0f;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t k = 0; k < r; ++k) axpy(pt[k * rows + i], m + i * cols, qt + k * cols, cols);
}

/// d row i (=, or += when `add`) sum_k p[i * r + k] * (qt row k): M' = P Q^T with P row-major.
inline void expand(float const* p, float const* qt, std::size_t rows, std::size_t cols, std::size_t r, float* d,
                   bool add) noexcept {
  for (std::size_t i = 0; i < rows; ++i) {
    float* const di = d + i * cols;
    if (!add)
      for (std::size_t j = 0; j < cols; ++j) di[j] = 0.0f;
    in_groups_of_four(r, [&](auto group, std::size_t k0) {
      constexpr std::size_t K = decltype(group)::value;
      float const* x[K];
      for (std::size_t k = 0; k < K; ++k) x[k] = qt + (k0 + k) * cols;
      combine<K>(p + i * r + k0, x, di, cols);
    });
  }
}

/// dst (cols x rows) = src (rows x cols)^T, times `scale`.
inline void transpose(float const* src, std::size_t rows, std::size_t cols, float* dst, float scale = 1.0f) noexcept {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j] * scale;
}

/// Modified Gram-Schmidt on the r rows (each n long) of pt, each projection removed twice
/// ("twice is enough", Giraud et al. 2005); a row with (relatively) nothing left becomes zero, so
/// a rank-deficient M never yields a non-orthogonal P; non-finite rows become NaN.
inline void orthonormalize_rows(float* pt, std::size_t r, std::size_t n) noexcept {
  for (std::size_t c = 0; c < r; ++c) {
    float* const v = pt + c * n;
    float const before = std::sqrt(dot(v, v, n));
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t prev = 0; prev < c; ++prev) {
        float const* const u = pt + prev * n;
        axpy(-dot(u, v, n), u, v, n);
      }
    float const norm = std::sqrt(dot(v, v, n));
    if (!std::isfinite(norm) || !std::isfinite(before)) {
      for (std::size_t j = 0; j < n; ++j) v[j] = std::numeric_limits<float>::quiet_NaN();
    } else if (norm <= 1e-5f * before || norm <= 1e-30f) {
      for (std::size_t j = 0; j < n; ++j) v[j] = 0.0f;
    } else {
      for (std::size_t j = 0; j < n; ++j) v[j] /= norm;
    }
  }
}

}  // namespace sluice::detail::compress
