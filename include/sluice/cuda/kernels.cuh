// Device kernels of the CUDA backend and their host wrappers. Every per-element step is a functor
// of sluice/cuda/functors.hpp, shared with the CPU tests, so the bytes the device writes are the
// CPU codecs' bytes. Wrappers take device spans and a stream, queue work asynchronously and return
// a device_status; cuda::check(status, what) turns it into sluice::error at the host boundary.
//
//   feedback_maxmin   fused c = g + e, max-min quantize (CUB block reduction of the range,
//                     vectorized loads), e = c - decode: the ranges and levels sections of the frame
//   dequantize_add    dense += decode(ranges, levels)
//   top_k_select      exact top-k by radix select on the magnitude bits (three histogram passes,
//                     11 + 11 + 9 bits, AIR top-k style: the second pass filters the first digit's
//                     bin into a candidate buffer that the third reads), ties to the lower index,
//                     then an ordered cub::DeviceSelect of the indices; with feedback fused
//                     (c = g + e in the first pass, e = c - c where sent)
//   block_top_k_select  block_top_k's L1/L2 block scores, the best blocks by top_k_select, their
//                     elements gathered; with feedback fused (c = g + e scored in one pass,
//                     e = +0 in the kept blocks)
//   random_k_select   random_k's shared-randomness draws (Floyd's steps resolved per thread, a
//                     table of first draws, a bitmap read in order by a CUB scan), the values
//                     gathered; with feedback fused (c = g + e, e = c - sent where sent)
//   scatter_add       dense[idx] += vals (distinct indices, as in every sluice sparse frame)
//   adam_step, sgd_step  the dense optimizer updates, optional bf16 parameter shadow
//   adam_sparse_step, sgd_sparse_step  the lazy sparse updates (element or block indices), and
//                     the bf16-moment updates (dense or sparse, stochastic rounding as the CPU's)
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <sluice/cuda/concepts.hpp>
#include <sluice/cuda/functors.hpp>
#include <sluice/cuda/runtime.cuh>

namespace sluice::cuda {}  // namespace sluice::cuda

// The kernels live outside any namespace named `cuda`: nvcc's generated launch stubs would read
// libcu++'s ::cuda there as sluice::cuda and fail to compile.
namespace sluice::cuda_detail {

using namespace sluice::cuda;

inline constexpr int threads = 256;

__host__ __device__ inline bool aligned16(void const* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

struct merge_range {
  __device__ maxmin_range_acc operator()(maxmin_range_acc a, maxmin_range_acc const& b) const noexcept {
    a.merge(b);
    return a;
  }
};

/// Adds a thread's count of non-finite compensated values to *bad (when any and bad is set).
__device__ inline void add_non_finite(unsigned long long* bad, unsigned own) noexcept {
  if (bad != nullptr && own != 0) atomicAdd(bad, static_cast<unsigned long long>(own));
}

/// One block per bucket (at most 4096 elements, staged in shared memory). With e, the count of
/// non-finite compensated values is added to *bad (when set); their bucket's residual is +0.
__global__ void __launch_bounds__(threads)
    feedback_maxmin(float const* __restrict__ g, float* __restrict__ e, std::size_t n, maxmin_params c,
                    philox_stream rs, std::uint8_t* __restrict__ ranges, std::uint8_t* __restrict__ levels,
                    unsigned long long* bad) {
  __shared__ __align__(16) float cs[4096];             // float4 stores
  __shared__ __align__(16) std::uint8_t qs[4096 + 8];  // uchar4 stores
  __shared__ float grid_min, grid_unit;
  using reduce = cub::BlockReduce<maxmin_range_acc, threads>;
  __shared__ typename reduce::TempStorage tmp;

  std::size_t const b = blockIdx.x, first = b * c.bucket;
  unsigned const len = static_cast<unsigned>(n - first < c.bucket ? n - first : c.bucket);
  unsigned const t = threadIdx.x;
  bool const vec = c.bucket % 4 == 0 && aligned16(g) && (e == nullptr || aligned16(e));
  unsigned const body = vec ? len / 4 * 4 : 0;

  maxmin_range_acc acc;
  unsigned own = 0;
  for (unsigned j = 4 * t; j < body; j += 4 * threads) {
    float4 gv = *reinterpret_cast<float4 const*>(g + first + j);
    if (e != nullptr) {
      float4 const ev = *reinterpret_cast<float4 const*>(e + first + j);
      gv.x = feedback_maxmin_element::compensate(gv.x, ev.x);
      gv.y = feedback_maxmin_element::compensate(gv.y, ev.y);
      gv.z = feedback_maxmin_element::compensate(gv.z, ev.z);
      gv.w = feedback_maxmin_element::compensate(gv.w, ev.w);
      own += non_finite_count(gv.x) + non_finite_count(gv.y) + non_finite_count(gv.z) + non_finite_count(gv.w);
    }
    *reinterpret_cast<float4*>(cs + j) = gv;
    acc.add(gv.x), acc.add(gv.y), acc.add(gv.z), acc.add(gv.w);
  }
  for (unsigned j = body + t; j < len; j += threads) {
    float const v = e != nullptr ? feedback_maxmin_element::compensate(g[first + j], e[first + j]) : g[first + j];
    cs[j] = v;
    acc.add(v);
    if (e != nullptr) own += non_finite_count(v);
  }
  add_non_finite(bad, own);
  if (t < 8) qs[len + t] = 0;  // a last partial group packs zeros
  maxmin_range_acc const total = reduce(tmp).Reduce(acc, merge_range{});
  if (t == 0) {
    maxmin_grid const gr = total.grid(len, c.bits);
    grid_min = gr.min, grid_unit = gr.unit;
    *reinterpret_cast<float2*>(ranges + 8 * b) = make_float2(gr.min, gr.unit);
  }
  __syncthreads();
  maxmin_grid const gr{grid_min, grid_unit};
  maxmin_encoder const enc(gr, c.bits, c.stochastic);
  for (unsigned j = 4 * t; j < body; j += 4 * threads) {
    float4 const cv = *reinterpret_cast<float4 const*>(cs + j);
    float const u[4] = {c.stochastic ? rs.uniform(first + j) : 0.0f, c.stochastic ? rs.uniform(first + j + 1) : 0.0f,
                        c.stochastic ? rs.uniform(first + j + 2) : 0.0f,
                        c.stochastic ? rs.uniform(first + j + 3) : 0.0f};
    std::uint8_t const q0 = enc.level(cv.x, u[0]), q1 = enc.level(cv.y, u[1]), q2 = enc.level(cv.z, u[2]),
                       q3 = enc.level(cv.w, u[3]);
    *reinterpret_cast<uchar4*>(qs + j) = make_uchar4(q0, q1, q2, q3);
    if (e != nullptr)
      *reinterpret_cast<float4*>(e + first + j) =
          make_float4(feedback_maxmin_element::residual(cv.x, gr, q0), feedback_maxmin_element::residual(cv.y, gr, q1),
                      feedback_maxmin_element::residual(cv.z, gr, q2), feedback_maxmin_element::residual(cv.w, gr, q3));
  }
  for (unsigned j = body + t; j < len; j += threads) {
    float const v = cs[j];
    std::uint8_t const q = enc.level(v, c.stochastic ? rs.uniform(first + j) : 0.0f);
    qs[j] = q;
    if (e != nullptr) e[first + j] = feedback_maxmin_element::residual(v, gr, q);
  }
  __syncthreads();
  std::size_t const bit0 = first * c.bits;
  if (bit0 % 8 == 0) {
    // Groups of 8 levels are `bits` whole bytes of this bucket alone.
    std::uint8_t* const out = levels + bit0 / 8;
    for (unsigned grp = t; 8 * grp < len; grp += threads) {
      std::uint64_t const w = pack8(qs + 8 * grp, c.bits);
      unsigned const have = len - 8 * grp < 8 ? len - 8 * grp : 8;
      unsigned const bytes = (have * c.bits + 7) / 8;
      std::uint8_t* const o = out + static_cast<std::size_t>(grp) * c.bits;
      if (bytes == 4 && reinterpret_cast<std::uintptr_t>(o) % 4 == 0)
        *reinterpret_cast<std::uint32_t*>(o) = static_cast<std::uint32_t>(w);
      else
        for (unsigned k = 0; k < bytes; ++k) o[k] = static_cast<std::uint8_t>(w >> (8 * k));
    }
  } else {
    // Buckets share their edge bytes: OR levels into the zeroed section, one 32-bit word at a time.
    auto* const words = reinterpret_cast<unsigned*>(levels);
    for (unsigned j = t; j < len; j += threads) {
      std::size_t const p = bit0 + static_cast<std::size_t>(j) * c.bits;
      unsigned const q = qs[j], s = static_cast<unsigned>(p % 32);
      atomicOr(words + p / 32, q << s);
      if (s + c.bits > 32) atomicOr(words + p / 32 + 1, q >> (32 - s));
    }
  }
}

__global__ void dequantize_add(float* __restrict__ dense, std::size_t n, maxmin_params c,
                               std::uint8_t const* __restrict__ ranges, std::uint8_t const* __restrict__ levels) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    float2 const r = *reinterpret_cast<float2 const*>(ranges + 8 * (i / c.bucket));
    dense[i] = dequantize_add_element{}(dense[i], maxmin_grid{r.x, r.y}, unpack_level(levels, i, c.bits));
  }
}

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
        v = make_float4(cuda::detail::add(gv.x, v.x), cuda::detail::add(gv.y, v.y), cuda::detail::add(gv.z, v.z),
                        cuda::detail::add(gv.w, v.w));
        reinterpret_cast<float4*>(x)[i] = v;
        own += non_finite_count(v.x) + non_finite_count(v.y) + non_finite_count(v.z) + non_finite_count(v.w);
      }
      rank(v.x), rank(v.y), rank(v.z), rank(v.w);
    }
    for (std::size_t i = 4 * quads + first; i < n; i += stride) {
      float v = x[i];
      if (Pass == 0 && g != nullptr) {
        x[i] = v = cuda::detail::add(g[i], v);
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
    if (feedback) x[idx[j]] = cuda::detail::sub(v, v);
  }
}

/// Scores of the blocks of block_top_k (block_top_k_score), one thread per block.
__global__ void block_scores(float const* __restrict__ x, std::size_t n, unsigned block, bool l2,
                             float* __restrict__ scores, std::size_t nb) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < nb; j += stride) {
    std::size_t const first = j * block;
    scores[j] = block_top_k_score(x + first, n - first < block ? n - first : block, l2);
  }
}

/// Error feedback around block_top_k: c = g + x is written to x and scored (block_top_k_score),
/// one thread per block, in one pass; the non-finite values of c are counted in *bad.
__global__ void feedback_block_scores(float const* __restrict__ g, float* __restrict__ x, std::size_t n, unsigned block,
                                      bool l2, float* __restrict__ scores, std::size_t nb, unsigned long long* bad) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned own = 0;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < nb; j += stride) {
    std::size_t const first = j * block, len = n - first < block ? n - first : block;
    for (std::size_t e = first; e < first + len; ++e)
      own += non_finite_count(x[e] = feedback_maxmin_element::compensate(g[e], x[e]));
    scores[j] = block_top_k_score(x + first, len, l2);
  }
  add_non_finite(bad, own);
}

/// The end of a sparse selection with feedback fused, as sluice::residual ends it: when this call
/// counted non-finite compensated values (*bad != 0), every non-finite residual becomes +0 and the
/// count is added to *total (when set); otherwise nothing is read.
__global__ void __launch_bounds__(threads)
    clear_non_finite(float* __restrict__ x, std::size_t n, unsigned long long const* bad, unsigned long long* total) {
  unsigned long long const b = *bad;
  if (b == 0) return;
  if (total != nullptr && blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(total, b);
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride)
    x[i] = kept_residual(x[i]);
}

/// The first NaN or Inf of x: *at = min(*at, its index) (*at starts at all ones).
__global__ void __launch_bounds__(threads)
    find_non_finite(float const* __restrict__ x, std::size_t n, unsigned long long* at) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride)
    if (non_finite_count(x[i]) != 0) {
      atomicMin(at, static_cast<unsigned long long>(i));
      return;  // later indices of this thread are larger
    }
}

/// The residual of the kept blocks: +0, what the CPU's fused feedback writes (c - c for finite c).
__global__ void zero_blocks(float* __restrict__ x, std::size_t n, unsigned block,
                            std::uint32_t const* __restrict__ blocks, std::size_t kb) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; t < kb * block; t += stride) {
    std::size_t const i = static_cast<std::size_t>(blocks[t / block]) * block + t % block;
    if (i < n) x[i] = 0.0f;
  }
}

/// The elements of the kept blocks, block after block, the tensor's last block zero-padded.
__global__ void gather_blocks(float const* __restrict__ x, std::size_t n, unsigned block,
                              std::uint32_t const* __restrict__ blocks, std::size_t kb, float* __restrict__ vals) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; t < kb * block; t += stride) {
    std::size_t const i = static_cast<std::size_t>(blocks[t / block]) * block + t % block;
    vals[t] = i < n ? x[i] : 0.0f;
  }
}

/// Slot of value t in random_k's table of first draws (Fibonacci hashing, linear probing).
__device__ inline std::size_t random_k_slot(unsigned t, std::size_t mask) noexcept {
  return static_cast<std::size_t>((static_cast<std::uint64_t>(t) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/// The target of every draw, entered in the table (key t + 1) with the first draw that chose it.
__global__ void random_k_targets(random_k_draw d, std::uint32_t* __restrict__ targets, unsigned* __restrict__ keys,
                                 unsigned* __restrict__ first, std::size_t mask) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < d.k; j += stride) {
    unsigned const t = d.target(j);
    targets[j] = t;
    std::size_t h = random_k_slot(t, mask);
    for (;;) {
      unsigned const prev = atomicCAS(keys + h, 0u, t + 1u);
      if (prev == 0u || prev == t + 1u) break;
      h = (h + 1) & mask;
    }
    atomicMin(first + h, static_cast<unsigned>(j));
  }
}

/// Whether each draw repeats an earlier target; every target enters the bitmap.
__global__ void random_k_repeats(random_k_draw d, std::uint32_t const* __restrict__ targets,
                                 unsigned const* __restrict__ keys, unsigned const* __restrict__ first,
                                 std::size_t mask, std::uint8_t* __restrict__ repeat, unsigned* __restrict__ bitmap) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < d.k; j += stride) {
    unsigned const t = targets[j];
    std::size_t h = random_k_slot(t, mask);
    while (keys[h] != t + 1u) h = (h + 1) & mask;
    repeat[j] = first[h] != static_cast<unsigned>(j) ? 1 : 0;
    atomicOr(bitmap + t / 32, 1u << (t % 32));
  }
}

/// The own index of every draw that inserts it (random_k_draw::own_inserted) enters the bitmap.
__global__ void random_k_own(random_k_draw d, std::uint32_t const* __restrict__ targets,
                             std::uint8_t const* __restrict__ repeat, unsigned* __restrict__ bitmap) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < d.k; j += stride)
    if (d.own_inserted(targets, repeat, j)) {
      std::uint64_t const o = d.own(j);
      atomicOr(bitmap + o / 32, 1u << (o % 32));
    }
}

struct popcount_of {
  __device__ unsigned operator()(unsigned w) const noexcept { return static_cast<unsigned>(__popc(w)); }
};

/// The drawn indices in increasing order: word w of the bitmap writes its bits from offsets[w].
__global__ void random_k_compact(unsigned const* __restrict__ bitmap, unsigned const* __restrict__ offsets,
                                 std::size_t words, std::uint32_t* __restrict__ idx) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t w = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; w < words; w += stride) {
    unsigned o = offsets[w];
    for (unsigned b = bitmap[w]; b != 0; b &= b - 1)
      idx[o++] = static_cast<std::uint32_t>(32 * w + static_cast<unsigned>(__ffs(static_cast<int>(b)) - 1));
  }
}

/// x = g + x (error feedback's compensation), float4 when aligned; non-finite sums counted in *bad.
__global__ void __launch_bounds__(threads)
    compensate(float const* __restrict__ g, float* __restrict__ x, std::size_t n, unsigned long long* bad) {
  unsigned own = 0;
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  std::size_t const quads = aligned16(g) && aligned16(x) ? n / 4 : 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < quads; i += stride) {
    float4 const gv = reinterpret_cast<float4 const*>(g)[i];
    float4 xv = reinterpret_cast<float4*>(x)[i];
    xv = make_float4(feedback_maxmin_element::compensate(gv.x, xv.x), feedback_maxmin_element::compensate(gv.y, xv.y),
                     feedback_maxmin_element::compensate(gv.z, xv.z), feedback_maxmin_element::compensate(gv.w, xv.w));
    reinterpret_cast<float4*>(x)[i] = xv;
    own += non_finite_count(xv.x) + non_finite_count(xv.y) + non_finite_count(xv.z) + non_finite_count(xv.w);
  }
  for (std::size_t i = 4 * quads + blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride)
    own += non_finite_count(x[i] = feedback_maxmin_element::compensate(g[i], x[i]));
  add_non_finite(bad, own);
}

/// Values of the drawn indices (scaled as random_k sends them); with feedback, e = c - sent there.
__global__ void random_k_gather(float* __restrict__ x, std::uint32_t const* __restrict__ idx, float* __restrict__ vals,
                                std::size_t k, random_k_element f, bool feedback) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < k; j += stride) {
    float const c = x[idx[j]], v = f.sent(c);
    vals[j] = v;
    if (feedback) x[idx[j]] = random_k_element::residual(c, v);
  }
}

__global__ void scatter_add(float* __restrict__ dense, std::uint32_t const* __restrict__ idx,
                            float const* __restrict__ vals, std::size_t k) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < k; j += stride)
    dense[idx[j]] = scatter_add_element{}(dense[idx[j]], vals[j]);
}

__global__ void __launch_bounds__(threads)
    adam_step(float* __restrict__ p, float const* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
              std::size_t n, adam_element f, std::uint16_t* __restrict__ shadow) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  std::size_t const quads = aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v) ? n / 4 : 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < quads; i += stride) {
    float4 pv = reinterpret_cast<float4*>(p)[i], mv = reinterpret_cast<float4*>(m)[i],
           vv = reinterpret_cast<float4*>(v)[i];
    float4 const gv = reinterpret_cast<float4 const*>(g)[i];
    f(pv.x, gv.x, mv.x, vv.x), f(pv.y, gv.y, mv.y, vv.y), f(pv.z, gv.z, mv.z, vv.z), f(pv.w, gv.w, mv.w, vv.w);
    reinterpret_cast<float4*>(p)[i] = pv, reinterpret_cast<float4*>(m)[i] = mv, reinterpret_cast<float4*>(v)[i] = vv;
    if (shadow != nullptr) {
      shadow[4 * i] = bf16_nearest(pv.x), shadow[4 * i + 1] = bf16_nearest(pv.y);
      shadow[4 * i + 2] = bf16_nearest(pv.z), shadow[4 * i + 3] = bf16_nearest(pv.w);
    }
  }
  for (std::size_t i = 4 * quads + blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride) {
    f(p[i], g[i], m[i], v[i]);
    if (shadow != nullptr) shadow[i] = bf16_nearest(p[i]);
  }
}

__global__ void __launch_bounds__(threads)
    sgd_step(float* __restrict__ p, float const* __restrict__ g, float* __restrict__ b, std::size_t n, sgd_element f,
             std::uint16_t* __restrict__ shadow) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride) {
    float unused = 0.0f;
    f(p[i], g[i], b != nullptr ? b[i] : unused);
    if (shadow != nullptr) shadow[i] = bf16_nearest(p[i]);
  }
}

/// Optimizer moments in device memory: fp32 (f) or bf16 bits (b, rounded by r).
struct moment_ptrs {
  float* f[2] = {nullptr, nullptr};
  std::uint16_t* b[2] = {nullptr, nullptr};
  bf16_moment_rounding r{};

  __device__ float load(unsigned j, std::size_t i) const noexcept {
    return b[j] != nullptr ? bf16_value(b[j][i]) : f[j][i];
  }
  __device__ void store(unsigned j, std::size_t i, float m) const noexcept {
    if (b[j] != nullptr)
      b[j][i] = r(m, i, j);
    else
      f[j][i] = m;
  }
};

/// Adam / AdamW at the elements `at` targets: value t of g updates element at.at(t) (the lazy
/// sparse step, or a dense one with bf16 moments). With per-entry counters `last`
/// (sparse_mode::catch_up), the element's skipped steps are replayed first (cu, up to step
/// cu.t - 1) and its counter set to cu.t; with g null too, only the replay runs, up to cu.t
/// (flush).
__global__ void __launch_bounds__(threads)
    adam_step_at(float* __restrict__ p, float const* __restrict__ g, std::size_t count, sparse_target at, moment_ptrs m,
                 adam_element f, std::uint16_t* __restrict__ shadow, std::uint32_t* __restrict__ last,
                 adam_catch_up cu) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  std::uint64_t const target = g != nullptr ? cu.t - 1 : cu.t;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; t < count; t += stride) {
    std::size_t const i = at.at(t);
    if (i == at.n) continue;
    float m0 = m.load(0, i), m1 = m.load(1, i);
    if (last != nullptr) {
      cu(p[i], m0, m1, last[i], target);
      last[i] = static_cast<std::uint32_t>(cu.t);
    }
    if (g != nullptr) f(p[i], g[t], m0, m1);
    m.store(0, i, m0), m.store(1, i, m1);
    if (shadow != nullptr) shadow[i] = bf16_nearest(p[i]);
  }
}

/// SGD at the elements `at` targets (see adam_step_at); without momentum m is not read.
__global__ void __launch_bounds__(threads)
    sgd_step_at(float* __restrict__ p, float const* __restrict__ g, std::size_t count, sparse_target at, moment_ptrs m,
                sgd_element f, std::uint16_t* __restrict__ shadow, std::uint32_t* __restrict__ last, sgd_catch_up cu) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  std::uint64_t const target = g != nullptr ? cu.t - 1 : cu.t;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; t < count; t += stride) {
    std::size_t const i = at.at(t);
    if (i == at.n) continue;
    float b = f.momentum ? m.load(0, i) : 0.0f;
    if (last != nullptr) {
      cu(p[i], b, last[i], target);
      last[i] = static_cast<std::uint32_t>(cu.t);
    }
    if (g != nullptr) f(p[i], g[t], b);
    if (f.momentum) m.store(0, i, b);
    if (shadow != nullptr) shadow[i] = bf16_nearest(p[i]);
  }
}

/// An optional per-element buffer (the bf16 shadow): empty, or n entries.
template <class T>
bool empty_or(std::span<T> b, std::size_t n) noexcept {
  return b.empty() || b.size() == n;
}

/// The optional buffer's device pointer, null when it is empty.
template <class T>
T* data_or_null(std::span<T> b) noexcept {
  return b.empty() ? nullptr : b.data();
}

/// Blocks for a grid-stride loop over n items: enough to fill the device, no more than needed.
inline unsigned grid_for(std::size_t n, std::size_t per_thread = 1) noexcept {
  std::size_t const want = (n / per_thread + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::size_t>(want, 1, 132 * 32));
}

}  // namespace sluice::cuda_detail

namespace sluice::cuda {

namespace kernel = sluice::cuda_detail;

/// Device bytes feedback_maxmin writes at `payload`: the ranges then the levels section, rounded
/// up to 8 (the kernel may OR into the last 32-bit word).
inline std::size_t maxmin_payload_bytes(std::size_t n, maxmin_params c) noexcept {
  std::size_t const nb = (n + c.bucket - 1) / c.bucket;
  return (8 * nb + (n * c.bits + 7) / 8 + 7) / 8 * 8;
}

/// Device counters of error feedback's non-finite handling (the device side of feedback_report):
/// the feedback wrappers given count() add the number of NaN or Inf compensated values to it (what
/// non_finite_values counts under every policy), and find() locates the first NaN or Inf of a
/// gradient before anything changes (what non_finite_policy::throw_error and skip_step act on,
/// see apply_non_finite_policy). One counter serves any number of calls on one stream.
class non_finite_counter {
 public:
  non_finite_counter() : words_(2) {
    check(cudaMemset(words_.data(), 0, 2 * sizeof(unsigned long long)), "cuda::non_finite_counter");
  }
  /// The device word the feedback wrappers add to.
  [[nodiscard]] unsigned long long* count() noexcept { return words_.data(); }
  /// The count so far, reset to 0 (synchronizes `s`): pass it to feedback_state::record_non_finite.
  [[nodiscard]] std::uint64_t take(cudaStream_t s) {
    unsigned long long v = 0;
    check(cudaMemcpyAsync(&v, words_.data(), sizeof v, cudaMemcpyDeviceToHost, s), "cuda::non_finite_counter::take");
    check(cudaMemsetAsync(words_.data(), 0, sizeof v, s), "cuda::non_finite_counter::take");
    check(cudaStreamSynchronize(s), "cuda::non_finite_counter::take");
    return v;
  }
  /// Index of the first NaN or Inf of g, or std::size_t(-1) when every value is finite (as
  /// sluice::first_non_finite); synchronizes `s`.
  [[nodiscard]] std::size_t find(std::span<float const> g, cudaStream_t s) {
    unsigned long long* const at = words_.data() + 1;
    check(cudaMemsetAsync(at, 0xff, sizeof *at, s), "cuda::non_finite_counter::find");
    if (!g.empty())
      kernel::find_non_finite<<<kernel::grid_for(g.size()), kernel::threads, 0, s>>>(g.data(), g.size(), at);
    check(cudaGetLastError(), "cuda::non_finite_counter::find");
    unsigned long long v = 0;
    check(cudaMemcpyAsync(&v, at, sizeof v, cudaMemcpyDeviceToHost, s), "cuda::non_finite_counter::find");
    check(cudaStreamSynchronize(s), "cuda::non_finite_counter::find");
    return v == ~0ull ? static_cast<std::size_t>(-1) : static_cast<std::size_t>(v);
  }

 private:
  device_buffer<unsigned long long> words_;  // the count, find's index
};

/// Queues error feedback around max-min quantization on `s`: c = g + e, the frame's ranges and
/// levels sections into `payload` (maxmin_payload_bytes, 8-aligned device memory), e = c -
/// decode (+0 where not finite, as sluice::residual stores it; a bucket holding NaN or Inf keeps
/// +0 throughout). An empty `e` quantizes g alone. The sections equal the CPU encoder's bytes
/// (finish_maxmin_frame completes the frame on the host). Buckets of 64..4096, bits 1..8. With
/// e, a non-null `non_finite` (device memory, non_finite_counter::count()) receives the number of
/// NaN or Inf compensated values added.
inline device_status feedback_maxmin(std::span<float const> g, std::span<float> e, maxmin_params c,
                                     stream_key const& key, std::span<std::byte> payload,
                                     unsigned long long* non_finite, cudaStream_t s) noexcept {
  std::size_t const n = g.size();
  if (c.bits < 1 || c.bits > 8 || c.bucket < 64 || c.bucket > 4096 || (!e.empty() && e.size() != n) ||
      payload.size() < maxmin_payload_bytes(n, c) || reinterpret_cast<std::uintptr_t>(payload.data()) % 8 != 0)
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  std::size_t const nb = (n + c.bucket - 1) / c.bucket;
  auto* const ranges = reinterpret_cast<std::uint8_t*>(payload.data());
  if (c.bucket % 8 != 0) {
    if (auto const st = status_of(cudaMemsetAsync(ranges + 8 * nb, 0, payload.size() - 8 * nb, s));
        st != device_status::ok)
      return st;
  }
  kernel::feedback_maxmin<<<static_cast<unsigned>(nb), kernel::threads, 0, s>>>(
      g.data(), e.empty() ? nullptr : e.data(), n, c, philox_stream(key), ranges, ranges + 8 * nb, non_finite);
  return status_of(cudaGetLastError());
}

/// feedback_maxmin without counting the non-finite values.
inline device_status feedback_maxmin(std::span<float const> g, std::span<float> e, maxmin_params c,
                                     stream_key const& key, std::span<std::byte> payload, cudaStream_t s) noexcept {
  return feedback_maxmin(g, e, c, key, payload, nullptr, s);
}

/// Queues dense += decode(ranges, levels) on `s` (the two sections as feedback_maxmin writes
/// them, 8-aligned device memory).
inline device_status dequantize_add(std::span<float> dense, maxmin_params c, std::span<std::byte const> payload,
                                    cudaStream_t s) noexcept {
  std::size_t const n = dense.size(), nb = (n + c.bucket - 1) / c.bucket;
  if (c.bits < 1 || c.bits > 8 || c.bucket < 64 || c.bucket > 4096 || payload.size() < 8 * nb + (n * c.bits + 7) / 8 ||
      reinterpret_cast<std::uintptr_t>(payload.data()) % 8 != 0)
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  auto const* ranges = reinterpret_cast<std::uint8_t const*>(payload.data());
  kernel::dequantize_add<<<kernel::grid_for(n), kernel::threads, 0, s>>>(dense.data(), n, c, ranges, ranges + 8 * nb);
  return status_of(cudaGetLastError());
}

/// Device scratch of top_k_select for tensors of up to `n` elements.
class top_k_workspace {
 public:
  explicit top_k_workspace(std::size_t n)
      : n_(n),
        tiles_((n + kernel::tile - 1) / kernel::tile),
        state_(1),
        tie_count_(std::max<std::size_t>(tiles_, 1)),
        tie_cum_(std::max<std::size_t>(tiles_, 1)),
        selected_(1),
        cand_(std::max<std::size_t>(n / 16, std::size_t{1} << 16)) {
    require(n < (std::size_t{1} << 32), errc::invalid_argument,
            "cuda::top_k_workspace: {} elements; indices are 32-bit, split the tensor below 2^32", n);
    std::size_t scan_bytes = 0, select_bytes = 0;
    check(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, tie_count_.data(), tie_cum_.data(),
                                        static_cast<int>(tie_count_.size())),
          "cuda::top_k_workspace");
    check(cub::DeviceSelect::If(nullptr, select_bytes, thrust::counting_iterator<std::uint32_t>(0),
                                static_cast<std::uint32_t*>(nullptr), selected_.data(), static_cast<std::int64_t>(n),
                                kernel::top_k_selected{nullptr, nullptr}),
          "cuda::top_k_workspace");
    temp_ = device_buffer<std::byte>(std::max(scan_bytes, select_bytes));
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }

 private:
  friend device_status top_k_select(std::span<float const>, std::span<float>, std::size_t, top_k_workspace&,
                                    std::span<std::uint32_t>, std::span<float>, unsigned long long*,
                                    cudaStream_t) noexcept;
  std::size_t n_, tiles_;
  device_buffer<kernel::top_k_state> state_;
  device_buffer<unsigned> tie_count_, tie_cum_;
  device_buffer<std::int64_t> selected_;
  device_buffer<std::byte> temp_;
  device_buffer<unsigned> cand_;  // keys of the first digit's bin (AIR top-k's filtering)
};

/// Queues the exact top-k of x by magnitude on `s` (sluice::top_k's selection: the k largest
/// |x| ranked by their bits, NaN first, ties to the lower index): `indices` (increasing) and
/// `values` receive k entries. With a non-empty `g`, error feedback is fused: x holds e on entry,
/// c = g + e is ranked, and x holds the new residual (c where not sent, c - c where sent; when any
/// c was NaN or Inf, every non-finite residual becomes +0, as sluice::residual clears them) on
/// exit, and a non-null `non_finite` (device memory) receives the number of NaN or Inf values of c
/// added. write_top_k_frame builds the frame from the copied-back entries.
inline device_status top_k_select(std::span<float const> g, std::span<float> x, std::size_t k, top_k_workspace& ws,
                                  std::span<std::uint32_t> indices, std::span<float> values,
                                  unsigned long long* non_finite, cudaStream_t s) noexcept {
  std::size_t const n = x.size();
  if (n > ws.n_ || k > n || indices.size() < k || values.size() < k || (!g.empty() && g.size() != n))
    return device_status::size_mismatch;
  if (k == 0) return device_status::ok;
  kernel::top_k_state* const st = ws.state_.data();
  device_status r = status_of(cudaMemsetAsync(st, 0, sizeof(kernel::top_k_state), s));
  if (r != device_status::ok) return r;
  unsigned const grid = kernel::grid_for(n, 4 * 8), kk = static_cast<unsigned>(k);
  unsigned const cap = static_cast<unsigned>(ws.cand_.size());
  unsigned* const cand = ws.cand_.data();
  kernel::top_k_histogram<0><<<grid, kernel::threads, 0, s>>>(g.empty() ? nullptr : g.data(), x.data(), n, st, cand);
  kernel::top_k_choose<0><<<1, kernel::threads, 0, s>>>(st, kk, cap);
  kernel::top_k_histogram<1><<<grid, kernel::threads, 0, s>>>(nullptr, x.data(), n, st, cand);
  kernel::top_k_choose<1><<<1, kernel::threads, 0, s>>>(st, kk, cap);
  kernel::top_k_histogram<2><<<grid, kernel::threads, 0, s>>>(nullptr, x.data(), n, st, cand);
  kernel::top_k_choose<2><<<1, kernel::threads, 0, s>>>(st, kk, cap);
  unsigned const tiles = static_cast<unsigned>(ws.tiles_);
  kernel::top_k_tie_count<<<tiles, kernel::threads, 0, s>>>(x.data(), n, st, ws.tie_count_.data());
  std::size_t bytes = ws.temp_.size();
  r = status_of(cub::DeviceScan::InclusiveSum(ws.temp_.data(), bytes, ws.tie_count_.data(), ws.tie_cum_.data(),
                                              static_cast<int>(tiles), s));
  if (r != device_status::ok) return r;
  kernel::top_k_tie_index<<<tiles, kernel::threads, 0, s>>>(x.data(), n, st, ws.tie_cum_.data());
  bytes = ws.temp_.size();
  r = status_of(cub::DeviceSelect::If(ws.temp_.data(), bytes, thrust::counting_iterator<std::uint32_t>(0),
                                      indices.data(), ws.selected_.data(), static_cast<std::int64_t>(n),
                                      kernel::top_k_selected{x.data(), st}, s));
  if (r != device_status::ok) return r;
  kernel::top_k_gather<<<kernel::grid_for(k), kernel::threads, 0, s>>>(x.data(), indices.data(), values.data(), k,
                                                                       !g.empty());
  if (!g.empty())
    kernel::clear_non_finite<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(x.data(), n, &st->bad, non_finite);
  return status_of(cudaGetLastError());
}

/// top_k_select without counting the non-finite values.
inline device_status top_k_select(std::span<float const> g, std::span<float> x, std::size_t k, top_k_workspace& ws,
                                  std::span<std::uint32_t> indices, std::span<float> values, cudaStream_t s) noexcept {
  return top_k_select(g, x, k, ws, indices, values, nullptr, s);
}

/// Device scratch of block_top_k_select for tensors of up to `n` elements in blocks of `block`.
class block_top_k_workspace {
 public:
  block_top_k_workspace(std::size_t n, std::size_t block)
      : block_(block),
        scores_(std::max<std::size_t>((n + block - 1) / block, 1)),
        kept_(scores_.size()),
        bad_(1),
        select_(scores_.size()) {
    require(block >= 1 && block <= 65536, errc::invalid_argument,
            "cuda::block_top_k_workspace: block size {} is outside [1, 65536]", block);
  }

 private:
  friend device_status block_top_k_select(std::span<float const>, std::size_t, bool, std::size_t,
                                          block_top_k_workspace&, std::span<std::uint32_t>, std::span<float>,
                                          cudaStream_t) noexcept;
  friend device_status block_top_k_select(std::span<float const>, std::span<float>, std::size_t, bool, std::size_t,
                                          block_top_k_workspace&, std::span<std::uint32_t>, std::span<float>,
                                          unsigned long long*, cudaStream_t) noexcept;
  /// The kb best of the nb scores in scores_, their blocks' elements of x gathered.
  device_status select(float const* x, std::size_t n, std::size_t nb, std::size_t kb, std::span<std::uint32_t> blocks,
                       std::span<float> values, cudaStream_t s) noexcept {
    if (auto const r = status_of(cudaGetLastError()); r != device_status::ok) return r;
    if (auto const r = top_k_select({}, std::span<float>(scores_.data(), nb), kb, select_, blocks,
                                    std::span<float>(kept_.data(), kb), s);
        r != device_status::ok)
      return r;
    kernel::gather_blocks<<<kernel::grid_for(kb * block_), kernel::threads, 0, s>>>(x, n, static_cast<unsigned>(block_),
                                                                                    blocks.data(), kb, values.data());
    return status_of(cudaGetLastError());
  }
  std::size_t block_;
  device_buffer<float> scores_, kept_;
  device_buffer<unsigned long long> bad_;  // non-finite compensated values of the call
  top_k_workspace select_;
};

/// Queues block_top_k's selection on `s`: the L1 (l2 false) or L2 scores of the blocks of `block`
/// elements, the kb best blocks by top_k_select's rule (ties to the lower block), their indices
/// (increasing) into `blocks` and their elements into `values` (kb * block, the tensor's last
/// block zero-padded). write_block_top_k_frame builds the frame from the copied-back results.
inline device_status block_top_k_select(std::span<float const> x, std::size_t block, bool l2, std::size_t kb,
                                        block_top_k_workspace& ws, std::span<std::uint32_t> blocks,
                                        std::span<float> values, cudaStream_t s) noexcept {
  std::size_t const n = x.size(), nb = (n + block - 1) / block;
  if (block != ws.block_ || nb > ws.scores_.size() || kb > nb || blocks.size() < kb || values.size() < kb * block)
    return device_status::size_mismatch;
  if (kb == 0) return device_status::ok;
  kernel::block_scores<<<kernel::grid_for(nb), kernel::threads, 0, s>>>(x.data(), n, static_cast<unsigned>(block), l2,
                                                                        ws.scores_.data(), nb);
  return ws.select(x.data(), n, nb, kb, blocks, values, s);
}

/// block_top_k_select with error feedback fused, as sluice::residual around block_top_k: x holds
/// e on entry; c = g + e is written and scored in one pass, the kb best blocks of c selected and
/// gathered, and x holds the residual on exit (c outside the kept blocks, +0 in them; when any c was
/// NaN or Inf, every non-finite residual becomes +0), and a non-null `non_finite` (device memory)
/// receives the number of NaN or Inf values of c added.
inline device_status block_top_k_select(std::span<float const> g, std::span<float> x, std::size_t block, bool l2,
                                        std::size_t kb, block_top_k_workspace& ws, std::span<std::uint32_t> blocks,
                                        std::span<float> values, unsigned long long* non_finite,
                                        cudaStream_t s) noexcept {
  std::size_t const n = x.size(), nb = (n + block - 1) / block;
  if (g.size() != n || block != ws.block_ || nb > ws.scores_.size() || kb > nb || blocks.size() < kb ||
      values.size() < kb * block)
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  if (auto const r = status_of(cudaMemsetAsync(ws.bad_.data(), 0, sizeof(unsigned long long), s));
      r != device_status::ok)
    return r;
  kernel::feedback_block_scores<<<kernel::grid_for(nb), kernel::threads, 0, s>>>(
      g.data(), x.data(), n, static_cast<unsigned>(block), l2, ws.scores_.data(), nb, ws.bad_.data());
  if (kb != 0) {
    if (auto const r = ws.select(x.data(), n, nb, kb, blocks, values, s); r != device_status::ok) return r;
    kernel::zero_blocks<<<kernel::grid_for(kb * block), kernel::threads, 0, s>>>(
        x.data(), n, static_cast<unsigned>(block), blocks.data(), kb);
  }
  kernel::clear_non_finite<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(x.data(), n, ws.bad_.data(), non_finite);
  return status_of(cudaGetLastError());
}

/// block_top_k_select with feedback, without counting the non-finite values.
inline device_status block_top_k_select(std::span<float const> g, std::span<float> x, std::size_t block, bool l2,
                                        std::size_t kb, block_top_k_workspace& ws, std::span<std::uint32_t> blocks,
                                        std::span<float> values, cudaStream_t s) noexcept {
  return block_top_k_select(g, x, block, l2, kb, ws, blocks, values, nullptr, s);
}

/// Device scratch of random_k_select for tensors of up to `n` elements keeping up to `k`.
class random_k_workspace {
 public:
  random_k_workspace(std::size_t n, std::size_t k)
      : n_(n),
        k_(std::min(k, n)),
        slots_(std::bit_ceil(2 * k_ + 2)),
        targets_(std::max<std::size_t>(k_, 1)),
        keys_(slots_),
        first_(slots_),
        repeat_(std::max<std::size_t>(k_, 1)),
        bitmap_(std::max<std::size_t>((n + 31) / 32, 1)),
        offsets_(bitmap_.size()),
        bad_(1) {
    require(n < 0xffffffffu, errc::invalid_argument,
            "cuda::random_k_workspace: {} elements; indices are 32-bit, split the tensor below 2^32 - 1", n);
    std::size_t bytes = 0;
    check(cub::DeviceScan::ExclusiveSum(nullptr, bytes,
                                        thrust::make_transform_iterator(bitmap_.data(), kernel::popcount_of{}),
                                        offsets_.data(), static_cast<std::int64_t>(bitmap_.size())),
          "cuda::random_k_workspace");
    temp_ = device_buffer<std::byte>(std::max<std::size_t>(bytes, 1));
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }

 private:
  friend device_status random_k_select(std::span<float const>, std::span<float>, std::size_t, stream_key const&,
                                       random_k_element, random_k_workspace&, std::span<std::uint32_t>,
                                       std::span<float>, unsigned long long*, cudaStream_t) noexcept;
  std::size_t n_, k_, slots_;
  device_buffer<std::uint32_t> targets_;
  device_buffer<unsigned> keys_, first_;
  device_buffer<std::uint8_t> repeat_;
  device_buffer<unsigned> bitmap_, offsets_;
  device_buffer<std::byte> temp_;
  device_buffer<unsigned long long> bad_;  // non-finite compensated values of the call
};

/// Queues random_k's selection on `s`: the k indices every rank draws from `key` (pass
/// ctx.key().shared(), as sluice::random_k does) into `indices` (increasing) and the values there,
/// as `f` sends them (random_k_element::of(n, k, rescale)), into `values`. With a non-empty `g`,
/// error feedback is fused: x holds e on entry, c = g + e is sampled, and x holds the residual
/// (c where not sent, c - sent where sent; when any c was NaN or Inf, every non-finite residual
/// becomes +0, as sluice::residual clears them) on exit, and a non-null `non_finite` (device
/// memory) receives the number of NaN or Inf values of c added. write_random_k_frame builds the
/// frame from the copied-back values.
inline device_status random_k_select(std::span<float const> g, std::span<float> x, std::size_t k, stream_key const& key,
                                     random_k_element f, random_k_workspace& ws, std::span<std::uint32_t> indices,
                                     std::span<float> values, unsigned long long* non_finite, cudaStream_t s) noexcept {
  std::size_t const n = x.size();
  if (n > ws.n_ || k > ws.k_ || k > n || indices.size() < k || values.size() < k || (!g.empty() && g.size() != n))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  auto const clear = [&] {
    if (!g.empty())
      kernel::clear_non_finite<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(x.data(), n, ws.bad_.data(),
                                                                                  non_finite);
    return status_of(cudaGetLastError());
  };
  if (!g.empty()) {
    if (auto const r = status_of(cudaMemsetAsync(ws.bad_.data(), 0, sizeof(unsigned long long), s));
        r != device_status::ok)
      return r;
    kernel::compensate<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(g.data(), x.data(), n, ws.bad_.data());
  }
  if (k == 0) return clear();
  std::size_t const words = (n + 31) / 32, slots = std::bit_ceil(2 * k + 2), mask = slots - 1;
  for (auto const r : {status_of(cudaMemsetAsync(ws.keys_.data(), 0, 4 * slots, s)),
                       status_of(cudaMemsetAsync(ws.first_.data(), 0xff, 4 * slots, s)),
                       status_of(cudaMemsetAsync(ws.bitmap_.data(), 0, 4 * words, s))})
    if (r != device_status::ok) return r;
  random_k_draw const d{philox_stream(key), n, k};
  unsigned const grid = kernel::grid_for(k);
  kernel::random_k_targets<<<grid, kernel::threads, 0, s>>>(d, ws.targets_.data(), ws.keys_.data(), ws.first_.data(),
                                                            mask);
  kernel::random_k_repeats<<<grid, kernel::threads, 0, s>>>(d, ws.targets_.data(), ws.keys_.data(), ws.first_.data(),
                                                            mask, ws.repeat_.data(), ws.bitmap_.data());
  kernel::random_k_own<<<grid, kernel::threads, 0, s>>>(d, ws.targets_.data(), ws.repeat_.data(), ws.bitmap_.data());
  std::size_t bytes = ws.temp_.size();
  if (auto const r = status_of(cub::DeviceScan::ExclusiveSum(
          ws.temp_.data(), bytes, thrust::make_transform_iterator(ws.bitmap_.data(), kernel::popcount_of{}),
          ws.offsets_.data(), static_cast<std::int64_t>(words), s));
      r != device_status::ok)
    return r;
  kernel::random_k_compact<<<kernel::grid_for(words), kernel::threads, 0, s>>>(ws.bitmap_.data(), ws.offsets_.data(),
                                                                               words, indices.data());
  kernel::random_k_gather<<<grid, kernel::threads, 0, s>>>(x.data(), indices.data(), values.data(), k, f, !g.empty());
  return clear();
}

/// random_k_select without counting the non-finite values.
inline device_status random_k_select(std::span<float const> g, std::span<float> x, std::size_t k, stream_key const& key,
                                     random_k_element f, random_k_workspace& ws, std::span<std::uint32_t> indices,
                                     std::span<float> values, cudaStream_t s) noexcept {
  return random_k_select(g, x, k, key, f, ws, indices, values, nullptr, s);
}

/// Queues dense[indices[j]] += values[j] on `s`; indices distinct and below dense.size() (as in
/// every sluice sparse frame; duplicates would race).
inline device_status scatter_add(std::span<float> dense, std::span<std::uint32_t const> indices,
                                 std::span<float const> values, cudaStream_t s) noexcept {
  if (indices.size() != values.size()) return device_status::size_mismatch;
  if (indices.empty()) return device_status::ok;
  kernel::scatter_add<<<kernel::grid_for(indices.size()), kernel::threads, 0, s>>>(dense.data(), indices.data(),
                                                                                   values.data(), indices.size());
  return status_of(cudaGetLastError());
}

/// Queues one dense Adam / AdamW step on `s` with fp32 parameters and moments; `f` from
/// adam_element::from(policy.kernel(t)). A non-empty `shadow` receives the parameters as bf16 bits.
inline device_status adam_step(std::span<float> p, std::span<float const> g, std::span<float> m, std::span<float> v,
                               adam_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  if (g.size() != n || m.size() != n || v.size() != n || !kernel::empty_or(shadow, n))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::adam_step<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(p.data(), g.data(), m.data(), v.data(), n, f,
                                                                       kernel::data_or_null(shadow));
  return status_of(cudaGetLastError());
}

/// Queues one dense SGD step on `s`; `b` (the momentum buffer) may be empty without momentum.
inline device_status sgd_step(std::span<float> p, std::span<float const> g, std::span<float> b, sgd_element const& f,
                              std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  if (g.size() != n || (f.momentum && b.size() != n) || !kernel::empty_or(shadow, n))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::sgd_step<<<kernel::grid_for(n), kernel::threads, 0, s>>>(p.data(), g.data(), kernel::data_or_null(b), n, f,
                                                                   kernel::data_or_null(shadow));
  return status_of(cudaGetLastError());
}

/// Moments of an optimizer step on the device: fp32, or bf16 bits with the CPU's stochastic
/// rounding (bf16_moment_rounding::of(policy.seed, t, tensor)). Empty spans for moments the
/// optimizer does not keep (v for SGD, both for SGD without momentum).
struct device_moments {
  std::span<float> m{}, v{};              ///< fp32 moments
  std::span<std::uint16_t> m16{}, v16{};  ///< bf16 moments (used when m is empty)
  bf16_moment_rounding rounding{};        ///< for bf16 moments

  [[nodiscard]] bool bf16() const noexcept { return m.empty() && !m16.empty(); }
};

}  // namespace sluice::cuda

namespace sluice::cuda_detail {

/// Checks the moments against n elements (`count` of them used) and packs their pointers.
inline bool pack(sluice::cuda::device_moments const& d, std::size_t count, std::size_t n, moment_ptrs& out) noexcept {
  if (d.bf16()) {
    if (d.m16.size() != n || (count == 2 && d.v16.size() != n)) return false;
    out.b[0] = d.m16.data(), out.b[1] = count == 2 ? d.v16.data() : nullptr, out.r = d.rounding;
  } else {
    if ((count >= 1 && d.m.size() != n) || (count == 2 && d.v.size() != n)) return false;
    out.f[0] = count >= 1 ? d.m.data() : nullptr, out.f[1] = count == 2 ? d.v.data() : nullptr;
  }
  return true;
}

/// The sparse gradient's shape: `values` holds indices.size() * block entries, no more indices than
/// blocks (the indices lie in device memory; an element past the tensor's end is skipped).
inline bool sparse_shape(std::size_t n, std::span<std::uint32_t const> indices, std::span<float const> values,
                         std::size_t block) noexcept {
  return block >= 1 && values.size() == indices.size() * block && indices.size() <= (n + block - 1) / block;
}

/// The gradient of a catch_up step: sparse (sparse_shape), or dense when `indices` is empty,
/// `block` 1 and `values` holds n entries (`dense` says which).
inline bool catch_up_shape(std::size_t n, std::span<std::uint32_t const> indices, std::span<float const> values,
                           std::size_t block, bool& dense) noexcept {
  dense = indices.empty() && block == 1 && values.size() == n;
  return dense || sparse_shape(n, indices, values, block);
}

/// The buffers of an optimizer step on n elements: the moments (`count` of them used, their
/// pointers packed into `out`) and the shadow.
inline bool step_buffers(std::size_t n, sluice::cuda::device_moments const& mom, std::size_t count,
                         std::span<std::uint16_t> shadow, moment_ptrs& out) noexcept {
  return pack(mom, count, n, out) && empty_or(shadow, n);
}

/// step_buffers of a sparse_mode::catch_up state, with its n per-entry counters `last` at step
/// t >= 1.
inline bool catch_up_buffers(std::size_t n, sluice::cuda::device_moments const& mom, std::size_t count,
                             std::span<std::uint16_t> shadow, std::span<std::uint32_t> last, std::uint64_t t,
                             moment_ptrs& out) noexcept {
  return step_buffers(n, mom, count, shadow, out) && last.size() == n && t != 0;
}

}  // namespace sluice::cuda_detail

namespace sluice::cuda {

/// Queues one lazy sparse Adam / AdamW step on `s` (sluice::adam with sparse_mode::lazy): the
/// update of f = adam_element::from(policy.kernel(t)) at the elements of the sparse gradient
/// (`indices` strictly increasing element indices, or block indices with `block` > 1 and
/// `values` block after block, the padding past the tensor's end ignored); untouched entries keep
/// their moments. fp32 or bf16 moments (`mom`); a non-empty `shadow` receives the updated
/// parameters as bf16 bits. catch_up is not on the device.
inline device_status adam_sparse_step(std::span<float> p, std::span<std::uint32_t const> indices,
                                      std::span<float const> values, std::size_t block, device_moments const& mom,
                                      adam_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  if (!kernel::sparse_shape(n, indices, values, block) || !kernel::step_buffers(n, mom, 2, shadow, mp))
    return device_status::size_mismatch;
  if (values.empty()) return device_status::ok;
  kernel::adam_step_at<<<kernel::grid_for(values.size()), kernel::threads, 0, s>>>(
      p.data(), values.data(), values.size(), sparse_target{indices.data(), block, n}, mp, f,
      kernel::data_or_null(shadow), nullptr, adam_catch_up{});
  return status_of(cudaGetLastError());
}

/// Queues one dense Adam / AdamW step with bf16 moments (`mom.m16`, `mom.v16`, rounded as the CPU
/// optimizer with state_type bf16 rounds them) on `s`.
inline device_status adam_step(std::span<float> p, std::span<float const> g, device_moments const& mom,
                               adam_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  if (!mom.bf16()) return adam_step(p, g, mom.m, mom.v, f, shadow, s);
  kernel::moment_ptrs mp;
  if (g.size() != n || !kernel::step_buffers(n, mom, 2, shadow, mp)) return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::adam_step_at<<<kernel::grid_for(n), kernel::threads, 0, s>>>(
      p.data(), g.data(), n, sparse_target{nullptr, 1, n}, mp, f, kernel::data_or_null(shadow), nullptr,
      adam_catch_up{});
  return status_of(cudaGetLastError());
}

/// Queues one lazy sparse SGD step on `s` (see adam_sparse_step); `mom.m` or `mom.m16` is the
/// momentum buffer (empty without momentum).
inline device_status sgd_sparse_step(std::span<float> p, std::span<std::uint32_t const> indices,
                                     std::span<float const> values, std::size_t block, device_moments const& mom,
                                     sgd_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  if (!kernel::sparse_shape(n, indices, values, block) || !kernel::step_buffers(n, mom, f.momentum ? 1 : 0, shadow, mp))
    return device_status::size_mismatch;
  if (values.empty()) return device_status::ok;
  kernel::sgd_step_at<<<kernel::grid_for(values.size()), kernel::threads, 0, s>>>(
      p.data(), values.data(), values.size(), sparse_target{indices.data(), block, n}, mp, f,
      kernel::data_or_null(shadow), nullptr, sgd_catch_up{});
  return status_of(cudaGetLastError());
}

/// Queues one dense SGD step with a bf16 momentum buffer (`mom.m16`) on `s`.
inline device_status sgd_step(std::span<float> p, std::span<float const> g, device_moments const& mom,
                              sgd_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  if (!mom.bf16()) return sgd_step(p, g, mom.m, f, shadow, s);
  kernel::moment_ptrs mp;
  if (g.size() != n || !kernel::step_buffers(n, mom, f.momentum ? 1 : 0, shadow, mp))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::sgd_step_at<<<kernel::grid_for(n), kernel::threads, 0, s>>>(
      p.data(), g.data(), n, sparse_target{nullptr, 1, n}, mp, f, kernel::data_or_null(shadow), nullptr,
      sgd_catch_up{});
  return status_of(cudaGetLastError());
}

/// Queues one sparse Adam / AdamW step with sparse_mode::catch_up on `s` (see adam_sparse_step):
/// at every element of the sparse gradient the steps skipped since its per-entry counter
/// (`last`: n device entries, the CPU state's last_step) are replayed first (`cu`, from
/// adam_catch_up::from(policy.kernel(t))), then the step runs and the counter becomes t. Empty
/// `indices` and `block` 1 with `values` of n entries: a dense step on a catch_up state.
inline device_status adam_sparse_step(std::span<float> p, std::span<std::uint32_t const> indices,
                                      std::span<float const> values, std::size_t block, device_moments const& mom,
                                      adam_element const& f, std::span<std::uint32_t> last, adam_catch_up const& cu,
                                      std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  bool dense = false;
  if (!kernel::catch_up_shape(n, indices, values, block, dense) ||
      !kernel::catch_up_buffers(n, mom, 2, shadow, last, cu.t, mp))
    return device_status::size_mismatch;
  if (values.empty()) return device_status::ok;
  kernel::adam_step_at<<<kernel::grid_for(values.size()), kernel::threads, 0, s>>>(
      p.data(), values.data(), values.size(), sparse_target{dense ? nullptr : indices.data(), block, n}, mp, f,
      kernel::data_or_null(shadow), last.data(), cu);
  return status_of(cudaGetLastError());
}

/// Queues Adam's flush of a catch_up state on `s` (sluice::adam::flush): every element is brought
/// up to step cu.t (the state's current step; cu = adam_catch_up::from(policy.kernel(t))), its
/// counter set to t, its moments stored again (bf16 moments with the rounding of step t) and the
/// shadow rewritten; no new step.
inline device_status adam_flush(std::span<float> p, device_moments const& mom, std::span<std::uint32_t> last,
                                adam_catch_up const& cu, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  if (!kernel::catch_up_buffers(n, mom, 2, shadow, last, cu.t, mp)) return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::adam_step_at<<<kernel::grid_for(n), kernel::threads, 0, s>>>(p.data(), nullptr, n,
                                                                       sparse_target{nullptr, 1, n}, mp, adam_element{},
                                                                       kernel::data_or_null(shadow), last.data(), cu);
  return status_of(cudaGetLastError());
}

/// Queues one sparse SGD step with sparse_mode::catch_up on `s` (see adam_sparse_step with
/// catch-up; the replay is exact, cu = sgd_catch_up::from(policy.kernel(t))).
inline device_status sgd_sparse_step(std::span<float> p, std::span<std::uint32_t const> indices,
                                     std::span<float const> values, std::size_t block, device_moments const& mom,
                                     sgd_element const& f, std::span<std::uint32_t> last, sgd_catch_up const& cu,
                                     std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  bool dense = false;
  if (!kernel::catch_up_shape(n, indices, values, block, dense) ||
      !kernel::catch_up_buffers(n, mom, f.momentum ? 1 : 0, shadow, last, cu.t, mp))
    return device_status::size_mismatch;
  if (values.empty()) return device_status::ok;
  kernel::sgd_step_at<<<kernel::grid_for(values.size()), kernel::threads, 0, s>>>(
      p.data(), values.data(), values.size(), sparse_target{dense ? nullptr : indices.data(), block, n}, mp, f,
      kernel::data_or_null(shadow), last.data(), cu);
  return status_of(cudaGetLastError());
}

/// Queues SGD's flush of a catch_up state on `s` (see adam_flush).
inline device_status sgd_flush(std::span<float> p, device_moments const& mom, std::span<std::uint32_t> last,
                               sgd_catch_up const& cu, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  if (!kernel::catch_up_buffers(n, mom, cu.momentum ? 1 : 0, shadow, last, cu.t, mp))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  sgd_element f{};
  f.momentum = cu.momentum;
  kernel::sgd_step_at<<<kernel::grid_for(n), kernel::threads, 0, s>>>(
      p.data(), nullptr, n, sparse_target{nullptr, 1, n}, mp, f, kernel::data_or_null(shadow), last.data(), cu);
  return status_of(cudaGetLastError());
}

}  // namespace sluice::cuda
