// Fused compensate + score for residual + block_top_k (its encode_compensated): e = g + e is
// written and the block's score computed while the block is in registers, so selection needs no
// second read of the tensor. Uses block_top_k's own scoring and selection building blocks;
// bit-identical to encode + decode.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include <sluice/compress/detail/block_score.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/residual.hpp>
#include <sluice/compress/detail/select.hpp>
#include <sluice/core/parallel.hpp>

namespace sluice::detail::compress {

template <block_score Score, std::size_t FixedB>
std::uint64_t compensate_and_score(float const* g, float* e, std::size_t n, std::size_t block, float* scores) {
  std::size_t const nb = (n + block - 1) / block, full = n / block;
  std::atomic<std::uint64_t> total{0};
  parallel_chunks(nb, std::max<std::size_t>(grain / block, 1), [&](std::size_t jb, std::size_t je, int) {
    std::uint32_t bad = 0;
    for (std::size_t j = jb; j < je; ++j) {
      std::size_t const first = j * block;
      float* const x = e + first;
      float const* const y = g + first;
      if (FixedB != 0 && j < full) {
        for (std::size_t k = 0; k < FixedB; ++k) {
          x[k] = y[k] + x[k];
          bad += non_finite(x[k]) ? 1u : 0u;
        }
        scores[j] = block_score_of<Score>(x, FixedB);
      } else {
        std::size_t const len = j < full ? block : n - first;
        for (std::size_t k = 0; k < len; ++k) {
          x[k] = y[k] + x[k];
          bad += non_finite(x[k]) ? 1u : 0u;
        }
        scores[j] = block_score_of<Score>(x, len);
      }
    }
    if (bad != 0) total.fetch_add(bad, std::memory_order_relaxed);
  });
  return total.load();
}

/// residual + block_top_k (C), fp32 state, float gradients: compensate and score in one pass,
/// select on the scores, write the frame from e, then zero the kept blocks (c - c = +0 for finite
/// c; a non-finite c becomes 0 as in the composition). `s` is the feedback's slice, `cw` the
/// codec's workspace.
template <class S, class C, class T, class Slice, class W>
std::size_t residual_fused_block(C const& c, Slice const& s, std::span<T const> grad, encode_context const& ctx, W& cw,
                                 std::span<std::byte> out) {
  static_assert(std::is_same_v<S, float> && std::is_same_v<T, float>, "fp32 state and float gradients only");
  c.validate();
  std::size_t const n = grad.size();
  detail::compress::check_index_range(n, "block_top_k");
  std::size_t const nb = c.block_count(n), b = c.keep_blocks(n), block = c.block;
  detail::compress::grow(cw.scores, nb);
  detail::compress::grow(cw.indices, b);
  detail::compress::grow(cw.kept_scores, b);
  float* const e = s.template buffer<float>(0).data();
  float* const scores = cw.scores.data();
  std::uint64_t bad = 0;
  if (c.score == block_score::l1)
    bad = block == 16 ? compensate_and_score<block_score::l1, 16>(grad.data(), e, n, block, scores)
                      : compensate_and_score<block_score::l1, 0>(grad.data(), e, n, block, scores);
  else
    bad = block == 16 ? compensate_and_score<block_score::l2, 16>(grad.data(), e, n, block, scores)
                      : compensate_and_score<block_score::l2, 0>(grad.data(), e, n, block, scores);
  if (bad != 0) s.state().record_non_finite(bad);
  detail::compress::select_top_k<float, std::uint32_t>(std::span<float>(scores, nb), b, cw.select,
                                                       std::span(cw.indices), std::span(cw.kept_scores));
  std::size_t const bytes = c.write(std::span<float const>(e, n), ctx, cw, out);
  parallel_chunks(b, std::size_t{1} << 10, [&](std::size_t jb, std::size_t je, int) {
    for (std::size_t j = jb; j < je; ++j) {
      std::size_t const first = static_cast<std::size_t>(cw.indices[j]) * block;
      std::fill(e + first, e + std::min(n, first + block), 0.0f);
    }
  });
  if (bad != 0)
    parallel_chunks(n, grain, [&](std::size_t ib, std::size_t ie, int) {
      for (std::size_t i = ib; i < ie; ++i) e[i] = non_finite(e[i]) ? 0.0f : e[i];
    });
  return bytes;
}

}  // namespace sluice::detail::compress
