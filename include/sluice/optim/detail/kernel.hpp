// Shared machinery of the CPU optimizers: SIMD loop pragma and the dense /
// block / element drivers that run an optimizer's per-tile kernel over cache-sized chunks on all
// threads (the Philox lanes, bf16 bits and prefetch they use live in core/detail/).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include <sluice/config.hpp>
#include <sluice/core/cache.hpp>
#include <sluice/core/detail/bf16_bits.hpp>
#include <sluice/core/detail/philox_lanes.hpp>
#include <sluice/core/detail/prefetch.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/simd.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/optim/catch_up.hpp>
#include <sluice/optim/state.hpp>

// `omp simd` vectorizes plain loops at -O2 when OpenMP is on; otherwise ask GCC/clang directly.
#if defined(_OPENMP)
#define SLUICE_OPTIM_SIMD _Pragma("omp simd")
#elif defined(__clang__)
#define SLUICE_OPTIM_SIMD _Pragma("clang loop vectorize(enable)")
#elif defined(__GNUC__)
#define SLUICE_OPTIM_SIMD _Pragma("GCC ivdep")
#else
#define SLUICE_OPTIM_SIMD
#endif

namespace sluice::detail::optim {

/// Elements per tile: the unit a kernel processes with its temporaries in L1 (5 arrays x 1 KiB).
inline constexpr std::size_t tile = 256;

/// Mutable access to optimizer_state internals for the kernels.
struct state_access {
  template <class S>
  static float* f32(S& s, std::size_t k) noexcept {
    return s.f32_.empty() ? nullptr : s.f32_.data() + k * s.stride_;
  }
  template <class S>
  static std::uint16_t* bf16(S& s, std::size_t k) noexcept {
    return s.bf16_.empty() ? nullptr : s.bf16_.data() + k * s.stride_;
  }
  template <class S>
  static std::uint32_t* last(S& s) noexcept {
    return s.last_.empty() ? nullptr : s.last_.data();
  }
  template <class S>
  static std::uint64_t& step(S& s) noexcept {
    return s.step_;
  }
};

/// Stochastic rounding of bf16 moments draws 8 bits per rounding from the step's stream: word k
/// serves elements 2k (bits 0-15) and 2k+1 (bits 16-31), moment 0 taking the low byte and moment
/// 1 the high byte of each half, placed in the top byte of from_float_stochastic's random word.
/// Rounding up then happens with the probability quantized to 1/256 (bias <= 2^-9 ulp), and one
/// Philox evaluation serves 8 elements: 16 bits per rounding made Philox the bottleneck.
///
/// Raw pointers into one tensor's parameters and state for one step.
struct tensor_refs {
  float* params = nullptr;
  std::size_t n = 0;
  float* mf[2] = {nullptr, nullptr};          // f32 moments
  std::uint16_t* mb[2] = {nullptr, nullptr};  // bf16 moments (bit patterns)
  std::uint32_t* last = nullptr;              // per-entry last step (catch_up)
  philox_lanes rs{};                          // stochastic-rounding stream of this step
};

template <class O, class T>
tensor_refs refs_of(optimizer_state<O, T>& s, std::span<float> params, std::uint64_t seed) {
  tensor_refs r;
  r.params = params.data();
  r.n = params.size();
  for (std::size_t k = 0; k < s.layout().moments; ++k) {
    r.mf[k] = state_access::f32(s, k);
    r.mb[k] = state_access::bf16(s, k);
  }
  r.last = state_access::last(s);
  // Shared rank: every replica applies the same aggregated update, so every replica must round
  // the same way or replicas drift apart (CGX's bug); the step keeps streams of steps disjoint.
  r.rs =
      philox_lanes::from(stream_key{seed, stream_key::shared_rank, static_cast<std::uint32_t>(s.step()), s.tensor()});
  return r;
}

/// No shadow output.
struct no_shadow {};

template <class Sh>
inline void write_shadow(Sh* SLUICE_RESTRICT out, float const* SLUICE_RESTRICT p, std::size_t n) noexcept {
  if constexpr (std::is_same_v<Sh, bfloat16>) {
    auto* o = reinterpret_cast<std::uint16_t*>(out);  // bfloat16 is one uint16 (standard layout)
    SLUICE_OPTIM_SIMD
    for (std::size_t i = 0; i < n; ++i) o[i] = bf16_nearest(p[i]);
  } else if constexpr (std::is_same_v<Sh, half>) {
    for (std::size_t i = 0; i < n; ++i) out[i] = half(p[i]);
  }
}

/// Prefetches element i of the parameters, moments and counters.
template <bool Bf16>
inline void prefetch_element(tensor_refs const& r, std::size_t nm, std::size_t i) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(r.params + i, 1, 3);
  for (std::size_t j = 0; j < nm; ++j) {
    if constexpr (Bf16)
      __builtin_prefetch(r.mb[j] + i, 1, 3);
    else
      __builtin_prefetch(r.mf[j] + i, 1, 3);
  }
  if (r.last != nullptr) __builtin_prefetch(r.last + i, 1, 3);
#else
  (void)r, (void)nm, (void)i;
#endif
}

/// Prefetches (for writing) every cache line of elements [i, i + len) of the parameters, moments
/// and counters: one block of a block-sparse step.
template <bool Bf16>
inline void prefetch_block(tensor_refs const& r, std::size_t nm, std::size_t i, std::size_t len) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  auto const lines = prefetch_lines;
  lines(r.params + i, len * sizeof(float));
  for (std::size_t j = 0; j < nm; ++j) {
    if constexpr (Bf16)
      lines(r.mb[j] + i, len * sizeof(std::uint16_t));
    else
      lines(r.mf[j] + i, len * sizeof(float));
  }
  if (r.last != nullptr) lines(r.last + i, len * sizeof(std::uint32_t));
#else
  (void)r, (void)nm, (void)i, (void)len;
#endif
}

/// Kernels with a fused one-pass bf16-moment step drawing its own rounding bits (core_bf16_stream).
template <class K>
concept fused_bf16_kernel = requires(K const& k, float* p, float const* g, std::uint16_t* b, philox_lanes const& rs) {
  k.core_bf16_stream(p, g, b, b, rs, std::uint64_t{}, std::size_t{});
};

/// Processes elements [base, base + len) contiguously: moments (loaded to float when bf16),
/// catch-up of skipped steps to `target`, the kernel's update with gradient g (nullptr: catch-up
/// only), per-entry counters, stochastic-rounding stores and the shadow, one tile at a time.
template <class K, bool Bf16, class Sh>
void run_contiguous(K const& k, tensor_refs const& r, float const* g, Sh* shadow, std::size_t base, std::size_t len,
                    std::uint64_t target) {
  alignas(64) float mbuf[2][tile];
  alignas(64) float tmp[tile];
  alignas(64) std::uint32_t words[tile / 2 + 8];
  alignas(64) std::uint16_t rnd[tile];
  std::size_t const nm = k.moments;
  if constexpr (Bf16 && fused_bf16_kernel<K>) {
    // Lazy or dense bf16 steps: one pass draws the rounding bits, widens, steps and rounds (no
    // catch-up), over stretches of 16 tiles: long enough for the loop's Philox pipeline (its
    // first group is not overlapped), short enough that the shadow reads p from L1.
    if (r.last == nullptr && g != nullptr && nm == 2) {
      constexpr std::size_t stretch = 16 * tile;
      for (std::size_t o = 0; o < len; o += stretch) {
        std::size_t const b = base + o, n = std::min(stretch, len - o);
        k.core_bf16_stream(r.params + b, g + o, r.mb[0] + b, r.mb[1] + b, r.rs, b, n);
        if constexpr (!std::is_same_v<Sh, no_shadow>) write_shadow(shadow + b, r.params + b, n);
      }
      return;
    }
  }
  if constexpr (!Bf16 && std::is_same_v<Sh, no_shadow> &&
                requires(K const& kk, float* f, float const* cf, float* const* mm, std::size_t z) {
                  kk.core_range(f, cf, mm, z);
                }) {
    // fp32 steps without catch-up or shadow: the kernel's own tile loop over the whole range.
    if (r.last == nullptr && g != nullptr) {
      float* m[2] = {r.mf[0] == nullptr ? nullptr : r.mf[0] + base, r.mf[1] == nullptr ? nullptr : r.mf[1] + base};
      k.core_range(r.params + base, g, m, len);
      return;
    }
  }
  for (std::size_t o = 0; o < len; o += tile) {
    std::size_t const b = base + o, n = std::min(tile, len - o);
    float* p = r.params + b;
    float* m[2] = {nullptr, nullptr};
    for (std::size_t j = 0; j < nm; ++j) {
      if constexpr (Bf16) {
        std::uint16_t const* src = r.mb[j] + b;
        float* dst = mbuf[j];
        SLUICE_OPTIM_SIMD
        for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
        m[j] = dst;
      } else {
        m[j] = r.mf[j] + b;
      }
    }
    if (r.last != nullptr) {
      k.catch_up(p, m, r.last + b, n, target);
      auto const now = static_cast<std::uint32_t>(g != nullptr ? target + 1 : target);
      std::fill_n(r.last + b, n, now);
    }
    if (g != nullptr) k.core(p, g + o, m, tmp, n);
    if constexpr (Bf16) {
      if (nm > 0) {
        // Half-word e of the stream (little-endian) holds element e's bits: copy them out.
        std::uint64_t const first = b >> 3, last_block = (b + n - 1) >> 3;
        r.rs.words(first, static_cast<std::size_t>(last_block - first + 1), words);
        std::memcpy(rnd, reinterpret_cast<unsigned char const*>(words) + 2 * (b & 7), 2 * n);
        for (std::size_t j = 0; j < nm; ++j) {
          std::uint16_t* dst = r.mb[j] + b;
          float const* src = m[j];
          unsigned const shift = 24 - 8 * static_cast<unsigned>(j);
          SLUICE_OPTIM_SIMD
          for (std::size_t i = 0; i < n; ++i)
            dst[i] = bf16_stochastic(src[i], (static_cast<std::uint32_t>(rnd[i]) << shift) & 0xff000000u);
        }
      }
    }
    if constexpr (!std::is_same_v<Sh, no_shadow>) write_shadow(shadow + b, p, n);
  }
}

/// Processes `count` scattered elements idx[0..count) with gradients vals[0..count): gathers them
/// into tiles, runs the same tile kernel as the contiguous path (so results are identical), and
/// scatters back.
template <class K, bool Bf16, class Sh, class Index>
void run_gather(K const& k, tensor_refs const& r, Index const* idx, float const* vals, Sh* shadow, std::size_t count,
                std::uint64_t target) {
  alignas(64) float pbuf[tile];
  alignas(64) float mbuf[2][tile];
  alignas(64) float tmp[tile];
  alignas(64) std::uint32_t lbuf[tile];
  std::size_t const nm = k.moments;
  for (std::size_t o = 0; o < count; o += tile) {
    std::size_t const n = std::min(tile, count - o);
    Index const* ix = idx + o;
    // Random indices defeat the hardware prefetcher: ask for element i + ahead while loading i.
    constexpr std::size_t ahead = 32;
    for (std::size_t i = 0; i < n; ++i) {
      if (o + i + ahead < count) prefetch_element<Bf16>(r, nm, static_cast<std::size_t>(ix[i + ahead]));
      pbuf[i] = r.params[ix[i]];
    }
    float* m[2] = {nullptr, nullptr};
    for (std::size_t j = 0; j < nm; ++j) {
      if constexpr (Bf16)
        for (std::size_t i = 0; i < n; ++i) mbuf[j][i] = bf16_to_float(r.mb[j][ix[i]]);
      else
        for (std::size_t i = 0; i < n; ++i) mbuf[j][i] = r.mf[j][ix[i]];
      m[j] = mbuf[j];
    }
    if (r.last != nullptr) {
      for (std::size_t i = 0; i < n; ++i) lbuf[i] = r.last[ix[i]];
      k.catch_up(pbuf, m, lbuf, n, target);
      auto const now = static_cast<std::uint32_t>(target + 1);
      for (std::size_t i = 0; i < n; ++i) r.last[ix[i]] = now;
    }
    k.core(pbuf, vals + o, m, tmp, n);
    for (std::size_t i = 0; i < n; ++i) r.params[ix[i]] = pbuf[i];
    for (std::size_t j = 0; j < nm; ++j) {
      if constexpr (Bf16) {
        unsigned const shift = 24 - 8 * static_cast<unsigned>(j);
        for (std::size_t i = 0; i < n; ++i) {
          std::uint32_t const bits = r.rs.word(ix[i] >> 1) >> (16 * (ix[i] & 1));
          r.mb[j][ix[i]] = bf16_stochastic(m[j][i], (bits << shift) & 0xff000000u);
        }
      } else {
        for (std::size_t i = 0; i < n; ++i) r.mf[j][ix[i]] = m[j][i];
      }
    }
    if constexpr (!std::is_same_v<Sh, no_shadow>)
      for (std::size_t i = 0; i < n; ++i) write_shadow(shadow + ix[i], pbuf + i, 1);
  }
}

/// Copies a short run of floats inline (a block of 16 is one cache line): a memcpy call per
/// block and array cost more than the block's arithmetic.
inline void copy_floats(float* SLUICE_RESTRICT dst, float const* SLUICE_RESTRICT src, std::size_t n) noexcept {
  SLUICE_OPTIM_SIMD
  for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
}

/// Small blocks (block_size <= tile / 2): copies a group of blocks into one tile, runs the tile
/// kernel once and copies back, like the element path. Issuing the loads of a whole group back to
/// back keeps many cache misses in flight, where one block at a time serialized them. The
/// arithmetic is elementwise, so results equal the element path and the dense step bit for bit.
template <class K, bool Bf16, class Sh, class Index>
void run_blocks(K const& k, tensor_refs const& r, sparse_view<float const, Index> s, std::size_t jb, std::size_t je,
                Sh* shadow, std::uint64_t target) {
  alignas(64) float pbuf[tile];
  alignas(64) float mbuf[2][tile];
  alignas(64) float tmp[tile];
  alignas(64) std::uint32_t lbuf[tile];
  alignas(64) std::uint32_t words[tile / 2 + 8];
  alignas(64) std::uint16_t rnd[tile];
  std::size_t const nm = k.moments, b = s.block_size, group = tile / b;
  float* m[2] = {mbuf[0], mbuf[1]};
  // Random blocks defeat the hardware prefetcher: request every line of block j + ahead while
  // loading block j, about 2 KiB of state ahead (10 blocks of 16 fp32 elements; 1 to 8 KiB
  // measured the same, as did prefetching a whole group at a time).
  std::size_t const ahead = std::clamp<std::size_t>(2048 / (b * (sizeof(float) + nm * (Bf16 ? 2 : 4))), 2, 32);
  auto const prefetch = [&](std::size_t j) {
    std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b;
    prefetch_block<Bf16>(r, nm, base, std::min(b, r.n - base));
  };
  for (std::size_t j = jb; j < std::min(je, jb + ahead); ++j) prefetch(j);
  if constexpr (!Bf16) {
    // fp32 moments without catch-up: step each block in place (the kernel is elementwise, so the
    // bits equal the tile path's), without copying it to the tile and back.
    if (r.last == nullptr) {
      // Kernels with a whole-range block loop (per-step constants set up once, not per block).
      if constexpr (std::is_same_v<Sh, no_shadow> &&
                    requires(K const& kk, float* f, float const* cf, Index const* ix, std::size_t z) {
                      kk.core_blocks(f, f, f, cf, ix, z, z, z, z);
                    }) {
        if (nm == 2) {
          k.core_blocks(r.params, r.mf[0], r.mf[1], s.values.data() + jb * b, s.indices.data() + jb, je - jb, b, r.n,
                        ahead);
          return;
        }
      }
      for (std::size_t j = jb; j < je; ++j) {
        if (j + ahead < je) prefetch(j + ahead);
        std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b;
        std::size_t const len = std::min(b, r.n - base);
        float* mm[2] = {r.mf[0] == nullptr ? nullptr : r.mf[0] + base, r.mf[1] == nullptr ? nullptr : r.mf[1] + base};
        k.core(r.params + base, s.values.data() + j * b, mm, tmp, len);
        if constexpr (!std::is_same_v<Sh, no_shadow>) write_shadow(shadow + base, r.params + base, len);
      }
      return;
    }
  }
  for (std::size_t j0 = jb; j0 < je; j0 += group) {
    std::size_t const j1 = std::min(je, j0 + group), count = (j1 - j0) * b;
    for (std::size_t j = j0; j < j1; ++j) {
      if (j + ahead < je) prefetch(j + ahead);
      std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b, off = (j - j0) * b;
      std::size_t const len = std::min(b, r.n - base);
      copy_floats(pbuf + off, r.params + base, len);
      for (std::size_t jj = 0; jj < nm; ++jj) {
        if constexpr (Bf16)
          for (std::size_t i = 0; i < len; ++i) mbuf[jj][off + i] = bf16_to_float(r.mb[jj][base + i]);
        else
          copy_floats(mbuf[jj] + off, r.mf[jj] + base, len);
      }
      if (r.last != nullptr) std::copy_n(r.last + base, len, lbuf + off);
      for (std::size_t i = len; i < b; ++i) {  // padding of a partial last block: computed, never stored
        pbuf[off + i] = 0;
        mbuf[0][off + i] = mbuf[1][off + i] = 0;
        lbuf[off + i] = static_cast<std::uint32_t>(target);
      }
    }
    if (r.last != nullptr) k.catch_up(pbuf, m, lbuf, count, target);
    k.core(pbuf, s.values.data() + j0 * b, m, tmp, count);
    auto const now = static_cast<std::uint32_t>(target + 1);
    for (std::size_t j = j0; j < j1; ++j) {
      std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b, off = (j - j0) * b;
      std::size_t const len = std::min(b, r.n - base);
      copy_floats(r.params + base, pbuf + off, len);
      if constexpr (Bf16) {
        if (nm > 0) {
          std::uint64_t const first = base >> 3, last_block = (base + len - 1) >> 3;
          r.rs.words(first, static_cast<std::size_t>(last_block - first + 1), words);
          std::memcpy(rnd, reinterpret_cast<unsigned char const*>(words) + 2 * (base & 7), 2 * len);
          for (std::size_t jj = 0; jj < nm; ++jj) {
            unsigned const shift = 24 - 8 * static_cast<unsigned>(jj);
            for (std::size_t i = 0; i < len; ++i)
              r.mb[jj][base + i] =
                  bf16_stochastic(mbuf[jj][off + i], (static_cast<std::uint32_t>(rnd[i]) << shift) & 0xff000000u);
          }
        }
      } else {
        for (std::size_t jj = 0; jj < nm; ++jj) copy_floats(r.mf[jj] + base, mbuf[jj] + off, len);
      }
      if (r.last != nullptr) std::fill_n(r.last + base, len, now);
      if constexpr (!std::is_same_v<Sh, no_shadow>) write_shadow(shadow + base, pbuf + off, len);
    }
  }
}

/// Elements per parallel chunk: enough that one chunk's streams fill a core's share of L2.
inline std::size_t chunk_elements(std::size_t bytes_per_element) {
  std::size_t const l2 = cache_sizes().l2_per_core();
  return std::max<std::size_t>(tile * 4, l2 / std::max<std::size_t>(bytes_per_element, 1));
}

/// Bytes one element moves: params + grad + moments (read and written).
inline std::size_t bytes_per_element(std::size_t moments, bool bf16) { return 12 + moments * (bf16 ? 4 : 8); }

/// Dense step (g != nullptr) or flush (g == nullptr) over the whole tensor.
template <class K, bool Bf16, class Sh>
void run_dense(K const& k, tensor_refs const& r, float const* g, Sh* shadow, std::uint64_t target, bool parallel) {
  auto body = [&](std::size_t b, std::size_t e, int) {
    run_contiguous<K, Bf16, Sh>(k, r, g == nullptr ? nullptr : g + b, shadow, b, e - b, target);
  };
  if (parallel)
    parallel_chunks(r.n, chunk_elements(bytes_per_element(k.moments, Bf16)), body);
  else
    body(0, r.n, 0);
}

/// Sparse step: block path (contiguous blocks, SIMD across each block) or element path (gather).
template <class K, bool Bf16, class Sh, class Index>
void run_sparse(K const& k, tensor_refs const& r, sparse_view<float const, Index> s, Sh* shadow, std::uint64_t target,
                bool parallel) {
  std::size_t const nnz = s.nnz(), bsz = s.block_size;
  if (bsz > 1) {
    auto body = [&](std::size_t jb, std::size_t je, int) {
      if (bsz <= tile / 2) {
        run_blocks<K, Bf16, Sh, Index>(k, r, s, jb, je, shadow, target);
        return;
      }
      for (std::size_t j = jb; j < je; ++j) {
        std::size_t const base = static_cast<std::size_t>(s.indices[j]) * bsz;
        std::size_t const len = std::min(bsz, r.n - base);
        run_contiguous<K, Bf16, Sh>(k, r, s.values.data() + j * bsz, shadow, base, len, target);
      }
    };
    std::size_t const grain = std::max<std::size_t>(1, chunk_elements(bytes_per_element(k.moments, Bf16)) / bsz);
    if (parallel)
      parallel_chunks(nnz, grain, body);
    else
      body(0, nnz, 0);
  } else {
    auto body = [&](std::size_t jb, std::size_t je, int) {
      run_gather<K, Bf16, Sh, Index>(k, r, s.indices.data() + jb, s.values.data() + jb, shadow, je - jb, target);
    };
    if (parallel)
      parallel_chunks(nnz, std::size_t{1} << 14, body);
    else
      body(0, nnz, 0);
  }
}

/// The zero-gradient step map of SGD on (param, buffer), [[a, b], [c, d]]: its powers are the
/// exact momentum catch-up (optim/catch_up.hpp).
using mat2 = sgd_catch_up::map;

/// Throws unless the policy's layout matches the state's and the sizes agree.
template <class State>
void check_state(State const& s, state_layout want, std::size_t params, char const* who) {
  require(s.layout() == want, errc::invalid_argument,
          "{} (tensor {}): state was created with {} but the policy needs {}; create the state from this policy", who,
          s.tensor(), s.layout(), want);
  require(params == s.size(), errc::size_mismatch, "{} (tensor {}): {} parameters for a state of {} elements", who,
          s.tensor(), params, s.size());
  require(!want.per_entry_steps || s.step() < std::uint64_t{0xffffffffu}, errc::unsupported,
          "{} (tensor {}): catch_up counts steps in 32 bits; step {} is past the limit", who, s.tensor(), s.step());
}

template <class Sh>
void check_shadow(std::span<Sh> shadow, std::size_t n, std::uint32_t tensor, char const* who) {
  if constexpr (!std::is_same_v<Sh, no_shadow>)
    require(shadow.size() == n, errc::size_mismatch, "{} (tensor {}): shadow of {} elements for {} parameters", who,
            tensor, shadow.size(), n);
}

/// Dispatches a validated step on the state's moment precision.
template <class K, class O, class Sh>
void dispatch_dense(K const& k, optimizer_state<O, float>& s, std::span<float> params, float const* g,
                    std::span<Sh> shadow, std::uint64_t seed, std::uint64_t target, bool parallel) {
  tensor_refs const r = refs_of(s, params, seed);
  Sh* sh = shadow.data();
  if (s.layout().moment_type == element_type::bf16)
    run_dense<K, true, Sh>(k, r, g, sh, target, parallel);
  else
    run_dense<K, false, Sh>(k, r, g, sh, target, parallel);
}

template <class K, class O, class Sh, class Index>
void dispatch_sparse(K const& k, optimizer_state<O, float>& s, std::span<float> params,
                     sparse_view<float const, Index> g, std::span<Sh> shadow, std::uint64_t seed, std::uint64_t target,
                     bool parallel) {
  tensor_refs const r = refs_of(s, params, seed);
  Sh* sh = shadow.data();
  if (s.layout().moment_type == element_type::bf16)
    run_sparse<K, true, Sh, Index>(k, r, g, sh, target, parallel);
  else
    run_sparse<K, false, Sh, Index>(k, r, g, sh, target, parallel);
}

}  // namespace sluice::detail::optim
