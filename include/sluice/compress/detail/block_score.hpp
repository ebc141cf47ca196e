// Block scores of block_top_k in a fixed summation order (every build, ISA and thread count
// agrees), shared by encode and the fused error-feedback path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include <sluice/compress/block_score.hpp>
#include <sluice/config.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/parallel.hpp>

namespace sluice::detail::compress {

/// Score of one block of `len` elements, in a fixed order so every build and thread count agrees:
/// four lane sums (lane = offset mod 4, each accumulated left to right from 0), combined as
/// (lane0 + lane1) + (lane2 + lane3).
template <block_score S, Element T>
inline float block_score_of(T const* SLUICE_RESTRICT x, std::size_t len) noexcept {
  float lane[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  std::size_t e = 0;
  for (; e + 4 <= len; e += 4)
    for (std::size_t j = 0; j < 4; ++j) {
      float const v = to_float(x[e + j]);
      lane[j] += S == block_score::l1 ? std::abs(v) : v * v;
    }
  for (std::size_t j = 0; e + j < len; ++j) {
    float const v = to_float(x[e + j]);
    lane[j] += S == block_score::l1 ? std::abs(v) : v * v;
  }
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

#if defined(__SSE2__)
/// Scores of four consecutive 16-float blocks at once, bit-identical to block_score_of: each
/// block's four lane sums in one vector, then a 4x4 transpose so the final (l0 + l1) + (l2 + l3)
/// of all four blocks is two vector adds and one store (the per-block horizontal sum was the cost
/// of the scoring pass).
template <block_score S>
inline void score4_f32(float const* SLUICE_RESTRICT x, float* SLUICE_RESTRICT out) noexcept {
  __m128 const magnitude = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  auto term = [&](float const* p) {
    __m128 const v = _mm_loadu_ps(p);
    return S == block_score::l1 ? _mm_and_ps(v, magnitude) : _mm_mul_ps(v, v);
  };
  __m128 t0, t1, t2, t3;
  __m128* t[4] = {&t0, &t1, &t2, &t3};
  for (int b = 0; b < 4; ++b) {
    float const* y = x + 16 * b;
    *t[b] = _mm_add_ps(_mm_add_ps(_mm_add_ps(term(y), term(y + 4)), term(y + 8)), term(y + 12));
  }
  _MM_TRANSPOSE4_PS(t0, t1, t2, t3);  // t_j = lane sum j of blocks 0..3
  _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(t0, t1), _mm_add_ps(t2, t3)));
}
#endif

/// Scores every block of `in` (block size B, last block partial) into `scores`, in parallel.
template <block_score S, std::size_t FixedB, Element T>
void score_blocks_as(std::span<T const> in, std::size_t B, std::span<float> scores) {
  std::size_t const n = in.size(), nb = scores.size();
  std::size_t const full = n / B;
  parallel_chunks(nb, std::size_t{1} << 12, [&](std::size_t b, std::size_t e, int) {
    T const* SLUICE_RESTRICT x = in.data();
    float* SLUICE_RESTRICT s = scores.data();
    std::size_t const fe = std::min(e, full);
    std::size_t j = b;
#if defined(__SSE2__)
    if constexpr (FixedB == 16 && std::is_same_v<T, float>)
      for (; j + 4 <= fe; j += 4) score4_f32<S>(x + j * 16, s + j);
#endif
    for (; j < fe; ++j) {
      if constexpr (FixedB != 0)
        s[j] = block_score_of<S>(x + j * FixedB, FixedB);
      else
        s[j] = block_score_of<S>(x + j * B, B);
    }
    for (j = std::max(b, full); j < e; ++j) s[j] = block_score_of<S>(x + j * B, n - j * B);
  });
}

/// Scores every block of `in` into `scores` (size ceil(n / B)).
template <Element T>
void score_blocks(std::span<T const> in, std::size_t B, block_score score, std::span<float> scores) {
  if (score == block_score::l1) {
    if (B == 16) return score_blocks_as<block_score::l1, 16>(in, B, scores);
    return score_blocks_as<block_score::l1, 0>(in, B, scores);
  }
  if (B == 16) return score_blocks_as<block_score::l2, 16>(in, B, scores);
  return score_blocks_as<block_score::l2, 0>(in, B, scores);
}

}  // namespace sluice::detail::compress
