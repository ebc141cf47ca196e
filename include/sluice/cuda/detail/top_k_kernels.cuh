// Kernels of the exact top-k by radix select on the magnitude bits (three histogram passes, 11 + 11 +
// 9 bits, AIR top-k style), the tie handling and the gather of the selected values.
// Kernels only, in detail::cuda (see launch.cuh); their launchers are in sluice/cuda/top_k.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <sluice/cuda/detail/launch.cuh>

namespace sluice::detail::cuda {

/// Radix-select state of one top-k call, in device memory.
struct top_k_state {
  unsigned prefix, mask, k_left, threshold, limit, all_ties, use_cand, cand_count;
  unsigned long long bad;  // non-finite compensated values (feedback fused)
  unsigned hist[3][2048];
};

inline constexpr int digit_shift[3] = {20, 9, 0};
inline constexpr int digit_bits[3] = {11, 11, 9};

/// Histogram of one digit of the keys that match the prefix chosen so far. Pass 0 with g set also
/// compensates: c = g + e is written to x and ranked, its non-finite values counted in st->bad. Pass 1 also appends the
/// matching keys to `cand` when the first digit's bin fits it (use_cand, set by top_k_choose<0>), and pass 2 then reads
/// those candidates instead of the whole input (AIR top-k's filtering): two full reads.
template <int Pass>
__global__ void __launch_bounds__(threads)
    top_k_histogram(float const* __restrict__ g, float* __restrict__ x, std::size_t n, top_k_state* st,
                    unsigned* __restrict__ cand) {
  constexpr int shift = digit_shift[Pass], bins = 1 << digit_bits[Pass];
  __shared__ unsigned h[bins];
  for (int i = threadIdx.x; i < bins; i += threads) h[i] = 0;
  __syncthreads();
  unsigned const prefix = Pass == 0 ? 0u : st->prefix, mask = Pass == 0 ? 0u : st->mask;
  bool const use_cand = Pass > 0 && st->use_cand != 0;
  auto count = [&](unsigned k) { atomicAdd(&h[(k >> shift) & (bins - 1)], 1u); };
  auto rank = [&](float v) {
    unsigned const k = magnitude_key(v);
    if ((k & mask) != prefix) return;
    count(k);
    if (Pass == 1 && use_cand) {
      // One atomic per warp: the lanes holding a candidate take consecutive slots.
      unsigned const lanes = __activemask();
      unsigned const leader = static_cast<unsigned>(__ffs(static_cast<int>(lanes)) - 1);
      unsigned const lane = threadIdx.x % 32, before = __popc(lanes & ((1u << lane) - 1u));
      unsigned base = 0;
      if (lane == leader) base = atomicAdd(&st->cand_count, static_cast<unsigned>(__popc(lanes)));
      base = __shfl_sync(lanes, base, static_cast<int>(leader));
      cand[base + before] = k;
    }
  };
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  std::size_t const first = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x;
  if (Pass == 2 && use_cand) {
    for (std::size_t i = first; i < st->cand_count; i += stride) {
      unsigned const k = cand[i];
      if ((k & mask) == prefix) count(k);
    }
  } else {
    std::size_t const quads = aligned16(x) && (g == nullptr || aligned16(g)) ? n / 4 : 0;
    unsigned own = 0;
    for (std::size_t i = first; i < quads; i += stride) {
      float4 v = reinterpret_cast<float4 const*>(x)[i];
      if (Pass == 0 && g != nullptr) {
        float4 const gv = reinterpret_cast<float4 const*>(g)[i];
        v = make_float4(detail::ieee::add(gv.x, v.x), detail::ieee::add(gv.y, v.y), detail::ieee::add(gv.z, v.z),
                        detail::ieee::add(gv.w, v.w));
        reinterpret_cast<float4*>(x)[i] = v;
        own += non_finite_count(v.x) + non_finite_count(v.y) + non_finite_count(v.z) + non_finite_count(v.w);
      }
      rank(v.x), rank(v.y), rank(v.z), rank(v.w);
    }
    for (std::size_t i = 4 * quads + first; i < n; i += stride) {
      float v = x[i];
      if (Pass == 0 && g != nullptr) {
        x[i] = v = detail::ieee::add(g[i], v);
        own += non_finite_count(v);
      }
      rank(v);
    }
    if (Pass == 0) add_non_finite(&st->bad, own);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < bins; i += threads)
    if (h[i] != 0) atomicAdd(&st->hist[Pass][i], h[i]);
}

/// Picks the bin holding the k_left-th largest key (k_total for the first digit; one block): scans
/// the counts from the top. After the first digit, decides whether its bin fits the candidates.
template <int Pass>
__global__ void __launch_bounds__(threads) top_k_choose(top_k_state* st, unsigned k_total, unsigned cand_capacity) {
  constexpr int shift = digit_shift[Pass], bins = 1 << digit_bits[Pass], items = bins / threads;
  using scan = cub::BlockScan<unsigned, threads>;
  __shared__ typename scan::TempStorage tmp;
  unsigned cnt[items], incl[items];
  for (int j = 0; j < items; ++j) cnt[j] = st->hist[Pass][bins - 1 - (threadIdx.x * items + j)];
  unsigned const k = Pass == 0 ? k_total : st->k_left;  // read before the scan's barriers, written after
  scan(tmp).InclusiveSum(cnt, incl);
  for (int j = 0; j < items; ++j) {
    if (incl[j] >= k && incl[j] - cnt[j] < k) {
      unsigned const bin = static_cast<unsigned>(bins - 1 - (threadIdx.x * items + j));
      unsigned const left = k - (incl[j] - cnt[j]);  // >= 1: how many of this bin are taken
      st->prefix |= bin << shift;
      st->mask |= static_cast<unsigned>(bins - 1) << shift;
      st->k_left = left;
      if (Pass == 0) st->use_cand = cnt[j] <= cand_capacity ? 1u : 0u;
      if (Pass == 2) {
        st->threshold = st->prefix;
        st->all_ties = left == cnt[j] ? 1u : 0u;
        st->limit = left == cnt[j] ? 0xffffffffu : 0u;  // else set by top_k_tie_index
      }
    }
  }
}

inline constexpr int tile_items = 16;
inline constexpr int tile = threads * tile_items;

/// Per tile, the count of keys equal to the threshold (only when not all ties are taken).
__global__ void __launch_bounds__(threads)
    top_k_tie_count(float const* __restrict__ x, std::size_t n, top_k_state const* st, unsigned* __restrict__ cnt) {
  if (st->all_ties != 0) return;
  using reduce = cub::BlockReduce<unsigned, threads>;
  __shared__ typename reduce::TempStorage tmp;
  unsigned const thr = st->threshold;
  std::size_t const base = blockIdx.x * static_cast<std::size_t>(tile) + threadIdx.x * tile_items;
  unsigned c = 0;
  for (int j = 0; j < tile_items; ++j) c += base + j < n && magnitude_key(x[base + j]) == thr ? 1u : 0u;
  unsigned const total = reduce(tmp).Sum(c);
  if (threadIdx.x == 0) cnt[blockIdx.x] = total;
}

/// In the tile where the running count of ties reaches k_left, the index past the last tie taken.
__global__ void __launch_bounds__(threads)
    top_k_tie_index(float const* __restrict__ x, std::size_t n, top_k_state* st, unsigned const* __restrict__ cum) {
  if (st->all_ties != 0) return;
  unsigned const want = st->k_left, before = blockIdx.x == 0 ? 0u : cum[blockIdx.x - 1];
  if (!(before < want && cum[blockIdx.x] >= want)) return;
  using scan = cub::BlockScan<unsigned, threads>;
  __shared__ typename scan::TempStorage tmp;
  unsigned const thr = st->threshold;
  std::size_t const base = blockIdx.x * static_cast<std::size_t>(tile) + threadIdx.x * tile_items;
  unsigned f[tile_items], r[tile_items];
  for (int j = 0; j < tile_items; ++j) f[j] = base + j < n && magnitude_key(x[base + j]) == thr ? 1u : 0u;
  scan(tmp).InclusiveSum(f, r);
  for (int j = 0; j < tile_items; ++j)
    if (f[j] != 0 && before + r[j] == want) st->limit = static_cast<unsigned>(base + j + 1);
}

struct top_k_selected {
  float const* x;
  top_k_state const* st;
  __device__ bool operator()(std::uint32_t i) const noexcept {
    unsigned const k = magnitude_key(x[i]), thr = st->threshold;
    return k > thr || (k == thr && i < st->limit);
  }
};

/// Values of the selected indices; with feedback, e = c - c where sent (0, NaN for a non-finite c,
/// which clear_non_finite then clears).
__global__ void top_k_gather(float* __restrict__ x, std::uint32_t const* __restrict__ idx, float* __restrict__ vals,
                             std::size_t k, bool feedback) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < k; j += stride) {
    float const v = x[idx[j]];
    vals[j] = v;
    if (feedback) x[idx[j]] = detail::ieee::sub(v, v);
  }
}

}  // namespace sluice::detail::cuda
