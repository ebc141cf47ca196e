// Exact top-k selection by magnitude without sorting: a strided sample brackets the threshold,
// one filter pass keeps the elements above the bracket and those inside it, and an exact fix-up
// among the few bracketed candidates settles the threshold and its ties. When the sample misses
// (adversarial or degenerate data), a three-level radix select on the magnitude bits decides.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/top_k_threshold.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/simd.hpp>

namespace sluice::detail::compress {

/// The ranking key of an element: the bit pattern of |x| (sign cleared) as a non-negative int32,
/// widened to the float layout for 16-bit types. It orders finite values and infinities by
/// magnitude and ranks NaN above +Inf (a NaN gradient is always selected, so it reaches the
/// receiver instead of hiding in a residual); -0 and +0 tie.
template <Element T>
inline std::int32_t magnitude_key(T x) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(x) & 0x7fffffffu);
  } else {
    auto const b = std::bit_cast<std::uint16_t>(x);
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(b & 0x7fffu) << 16);
  }
}

/// Scratch of select_top_k; sized on the first call for a given (n, k), reused afterwards.
template <Element T>
struct select_workspace {
  struct entry {
    std::uint32_t index;
    T value;
  };
  std::vector<entry> cand;                               ///< per chunk: list_stride(cap_cand) slots
  std::vector<std::size_t> n_above, n_cand, n_gt, n_eq;  ///< per chunk counts
  std::vector<std::size_t> quota, offset;                ///< per chunk ties taken / output offset
  std::vector<std::int32_t> sample, keys;                ///< sample keys; candidate keys
  std::vector<std::uint32_t> hist;                       ///< per chunk radix histograms
  std::size_t cap_cand = 0;
  std::int32_t lo = 0, hi = std::numeric_limits<std::int32_t>::max();  ///< the last filter's band
  bool force_radix = false;                                            ///< tests: always take the radix path
  bool used_radix = false;                                             ///< whether the last call took the radix path
};

/// Slots per chunk of a candidate list with capacity `cap`: writes past the capacity land in the
/// slack, so the hit path needs no bounds branch.
constexpr std::size_t list_stride(std::size_t cap) noexcept { return cap + 8; }

/// Chunks a selection over n elements is split into (one per thread, at least 2^16 elements each).
inline std::size_t select_chunks(std::size_t n) noexcept {
  std::size_t const t = static_cast<std::size_t>(std::max(1, max_threads()));
  return std::max<std::size_t>(1, std::min(t, n >> 16));
}
inline std::size_t chunk_begin(std::size_t c, std::size_t chunks, std::size_t n) noexcept {
  return c * n / chunks;  // c <= threads and n < 2^32: no overflow
}

/// Runs f(c) for every chunk c in [0, chunks) on the thread pool.
template <class F>
void for_chunks(std::size_t chunks, F&& f) {
  parallel_chunks(chunks, 1, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t c = b; c < e; ++c) f(c);
  });
}

/// The histogram of the band [lo, hi] that the filter pass keeps per chunk: 2048 ranges of key
/// distance below hi. That distance, mod 2^32, is <= hi - lo for a band key and >= 2^31 for one
/// above hi, so the latter's range index (>> shift <= 20) is >= 2048 and never a band range; such
/// entries count in 64 spare bins taken in turn (one shared bin would chain the increments through
/// store-to-load forwarding), and so does anything added with weight 0. No branch anywhere.
struct band_ranges {
  static constexpr std::uint32_t bins = 2048, spare = 64, stride = bins + spare;
  std::uint32_t hi = 0;
  int shift = 0;
  band_ranges(std::int32_t lo_key, std::int32_t hi_key) noexcept : hi(static_cast<std::uint32_t>(hi_key)) {
    int const span_bits = static_cast<int>(std::bit_width(hi - static_cast<std::uint32_t>(lo_key)));
    shift = span_bits > 11 ? span_bits - 11 : 0;
  }
  std::uint32_t range(std::int32_t key) const noexcept { return (hi - static_cast<std::uint32_t>(key)) >> shift; }
  std::uint32_t slot(std::int32_t key, std::size_t turn) const noexcept {
    return std::min(range(key), bins + static_cast<std::uint32_t>(turn % spare));
  }
};

/// Per chunk, counts the listed entries with key > thr.key and == thr.key, then hands out the
/// ties in chunk order and computes each chunk's output offset. Returns the total selected.
template <Element T>
std::size_t plan_output(select_workspace<T>& ws, std::size_t chunks, top_k_threshold const& thr) {
  for_chunks(chunks, [&](std::size_t c) {
    auto const* e = ws.cand.data() + c * list_stride(ws.cap_cand);
    std::size_t gt = 0, eq = 0;
    for (std::size_t j = 0; j < ws.n_cand[c]; ++j) {
      std::int64_t const key = magnitude_key(e[j].value);
      gt += key > thr.key;
      eq += key == thr.key;
    }
    ws.n_gt[c] = gt;
    ws.n_eq[c] = eq;
  });
  return plan_offsets(ws, chunks, thr.ties);
}

/// The float filter and emission at level L (compress/detail/select_body.hpp, stamped below).
template <sluice::simd L>
struct band_lanes;

}  // namespace sluice::detail::compress

#define SLUICE_SIMD_BODY <sluice/compress/detail/select_body.hpp>
#include <sluice/core/detail/simd_stamp.hpp>

namespace sluice::detail::compress {

/// Writes each chunk's selected entries (the listed ones passing thr) in index order at the
/// chunk's offset. Branch-free: every entry is written at the output cursor, which advances only
/// past the kept ones; the loop stops at the chunk's last output slot.
template <Element T, class Index>
void emit_entries(select_workspace<T>& ws, std::size_t chunks, top_k_threshold const& thr, std::span<Index> idx,
                  std::span<T> val) {
  for_chunks(chunks, [&](std::size_t c) {
    auto const* d = ws.cand.data() + c * list_stride(ws.cap_cand);
    std::size_t const nd = ws.n_cand[c];
    std::size_t o = ws.offset[c], q = ws.quota[c];
    std::size_t const end = o + ws.n_gt[c] + q;
    std::size_t j = 0;
    // Floats with 32-bit indices: whole groups in lanes (band_lanes::emit), the rest here.
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Index, std::uint32_t>)
      if (thr.key < top_k_threshold::no_key)
        j = detail::simd::dispatch([&](auto l) {
          return band_lanes<decltype(l)::value>::emit(d, nd, static_cast<std::int32_t>(thr.key), o, end, q, idx.data(),
                                                      val.data());
        });
    std::int64_t const t = thr.key;
    Index* SLUICE_RESTRICT io = idx.data();
    T* SLUICE_RESTRICT vo = val.data();
    for (; j < nd && o < end; ++j) {
      std::int64_t const key = magnitude_key(d[j].value);
      bool const tie = (key == t) & (q > 0);
      q -= tie;
      io[o] = static_cast<Index>(d[j].index);
      vo[o] = d[j].value;
      o += (key > t) | tie;
    }
  });
}

/// The key of descending rank r (0-based) among `keys` (reorders them).
inline std::int32_t key_at_rank(std::span<std::int32_t> keys, std::size_t r) {
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(r), keys.end(), std::greater<>{});
  return keys[r];
}

/// Hands out the ties in chunk order and computes each chunk's output offset from n_gt / n_eq.
/// Returns the total selected.
template <Element T>
std::size_t plan_offsets(select_workspace<T>& ws, std::size_t chunks, std::size_t ties) {
  std::size_t total = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    ws.quota[c] = std::min(ties, ws.n_eq[c]);
    ties -= ws.quota[c];
    ws.offset[c] = total;
    total += ws.n_gt[c] + ws.quota[c];
  }
  return total;
}

/// Exact threshold for the k largest of the listed entries (ties: lower index first), given
/// that the a = sum of n_above entries with key > ws.hi are all selected (a < k <= listed).
/// Plans the output as plan_output does. The range of the filter's band histograms (band_ranges)
/// that holds the threshold is found from their sum, its keys are collected per chunk in
/// parallel, and nth_element runs on those few only.
template <Element T>
top_k_threshold band_threshold(select_workspace<T>& ws, std::size_t chunks, std::size_t k) {
  constexpr std::uint32_t stride = band_ranges::stride;
  band_ranges const br(ws.lo, ws.hi);
  std::size_t a = 0;
  for (std::size_t c = 0; c < chunks; ++c) a += ws.n_above[c];
  std::size_t const need = k - a;
  std::size_t above = 0, in_bin = 0;
  std::uint32_t bin = 0;
  for (;; ++bin) {  // terminates: the band holds >= need entries
    in_bin = 0;
    for (std::size_t c = 0; c < chunks; ++c) in_bin += ws.hist[c * stride + bin];
    if (above + in_bin >= need) break;
    above += in_bin;
  }
  // Each chunk's keys in that range, at the chunk's offset (n_eq holds the offset meanwhile).
  grow(ws.keys, 2 * in_bin + chunks);
  std::size_t o = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    ws.n_eq[c] = o;
    o += ws.hist[c * stride + bin] + 1;  // + 1: the slot of the branch-free collect's last write
  }
  for_chunks(chunks, [&](std::size_t c) {
    auto const* e = ws.cand.data() + c * list_stride(ws.cap_cand);
    std::int32_t* SLUICE_RESTRICT out = ws.keys.data() + ws.n_eq[c];
    std::uint32_t const target = bin;
    std::size_t m = 0;
    for (std::size_t j = 0; j < ws.n_cand[c]; ++j) {
      out[m] = magnitude_key(e[j].value);
      m += br.range(magnitude_key(e[j].value)) == target;
    }
  });
  std::int32_t* const range = ws.keys.data() + o;
  std::size_t r = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    std::size_t const nb = ws.hist[c * stride + bin];
    std::copy_n(ws.keys.data() + ws.n_eq[c], nb, range + r);
    r += nb;
  }
  std::int32_t const t = key_at_rank(std::span(range, in_bin), need - 1 - above);
  std::size_t gt_total = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    std::uint32_t const* h = ws.hist.data() + c * stride;
    std::size_t gt = ws.n_above[c], eq = 0;
    for (std::uint32_t j = 0; j < bin; ++j) gt += h[j];
    std::int32_t const* kc = ws.keys.data() + ws.n_eq[c];
    for (std::size_t j = 0; j < h[bin]; ++j) {
      gt += kc[j] > t;
      eq += kc[j] == t;
    }
    ws.n_gt[c] = gt;
    ws.n_eq[c] = eq;
    gt_total += gt;
  }
  top_k_threshold const thr{t, k - gt_total};
  plan_offsets(ws, chunks, thr.ties);
  return thr;
}

/// Bit j set when element j of the group has key >= lo (the elements that are not float: the
/// float filter is band_lanes).
template <std::size_t G, Element T>
inline unsigned group_mask(T const* SLUICE_RESTRICT x, std::int32_t lo) noexcept {
  unsigned m = 0;
  for (std::size_t j = 0; j < G; ++j) m |= static_cast<unsigned>(magnitude_key(x[j]) >= lo) << j;
  return m;
}

/// Filter pass: per chunk, every entry with key >= lo goes to `cand` (in index order); n_cand
/// counts them and n_above those with key > hi. Counts keep running past the capacity; an
/// overflow shows as n_cand > cap_cand.
template <Element T>
void filter_band(std::span<T const> in, select_workspace<T>& ws, std::size_t chunks, std::int32_t lo, std::int32_t hi) {
  std::size_t const n = in.size();
  ws.lo = lo;
  ws.hi = hi;
  grow(ws.hist, chunks * band_ranges::stride);
  for_chunks(chunks, [&](std::size_t c) {
    std::size_t const b = chunk_begin(c, chunks, n), e = chunk_begin(c + 1, chunks, n);
    // Each chunk owns cap + 8 slots: the slack absorbs writes past the capacity, so the hit path
    // is branch-free; counts keep running and reveal the overflow.
    auto* SLUICE_RESTRICT d = ws.cand.data() + c * list_stride(ws.cap_cand);
    std::size_t const cc = ws.cap_cand;
    std::size_t na = 0, nd = 0;
    T const* SLUICE_RESTRICT x = in.data();
    std::int32_t const lo_key = lo, hi_key = hi;
    std::uint32_t* SLUICE_RESTRICT h = ws.hist.data() + c * band_ranges::stride;
    std::fill(h, h + band_ranges::stride, 0u);
    band_ranges const br(lo, hi);
    auto one = [&](std::size_t i) {
      std::int32_t const key = magnitude_key(x[i]);
      d[std::min(nd, cc)] = {static_cast<std::uint32_t>(i), x[i]};
      h[br.slot(key, nd)] += key >= lo_key;
      nd += key >= lo_key;
      na += key > hi_key;
    };
    std::size_t i = b;
    if constexpr (std::is_same_v<T, float>)
      i = detail::simd::dispatch(
          [&](auto l) { return band_lanes<decltype(l)::value>::filter(x, b, e, lo_key, hi_key, d, cc, nd, na, h); });
    constexpr std::size_t group = 16;
    for (; i + group <= e; i += group) {
      unsigned const m = group_mask<group>(x + i, lo_key);
      for (unsigned bits = m; bits != 0; bits &= bits - 1) one(i + static_cast<std::size_t>(std::countr_zero(bits)));
    }
    for (; i < e; ++i) one(i);
    ws.n_above[c] = na;
    ws.n_cand[c] = nd;
  });
}

/// Three-level radix select (11 + 11 + 9 bits of the key) with per-chunk histograms: the exact
/// threshold and each chunk's count above it, in three reads of the data.
template <Element T>
top_k_threshold radix_threshold(std::span<T const> in, std::size_t k, select_workspace<T>& ws, std::size_t chunks) {
  std::size_t const n = in.size();
  constexpr int shifts[3] = {20, 9, 0};
  constexpr int widths[3] = {11, 11, 9};
  constexpr std::size_t stride = 2048;
  grow(ws.hist, chunks * stride);
  std::fill(ws.n_gt.begin(), ws.n_gt.begin() + static_cast<std::ptrdiff_t>(chunks), 0);
  std::uint32_t prefix = 0, mask = 0;
  std::size_t need = k;
  std::size_t last_bin = 0;
  for (int level = 0; level < 3; ++level) {
    int const shift = shifts[level];
    std::uint32_t const bins = 1u << widths[level];
    for_chunks(chunks, [&](std::size_t c) {
      std::uint32_t* SLUICE_RESTRICT h = ws.hist.data() + c * stride;
      std::fill(h, h + bins, 0u);
      std::size_t const b = chunk_begin(c, chunks, n), e = chunk_begin(c + 1, chunks, n);
      T const* SLUICE_RESTRICT x = in.data();
      for (std::size_t i = b; i < e; ++i) {
        auto const key = static_cast<std::uint32_t>(magnitude_key(x[i]));
        if ((key & mask) == prefix) ++h[(key >> shift) & (bins - 1)];
      }
    });
    std::size_t cum = 0;
    std::uint32_t bin = bins;
    while (bin > 0) {
      --bin;
      std::size_t h = 0;
      for (std::size_t c = 0; c < chunks; ++c) h += ws.hist[c * stride + bin];
      if (cum + h >= need) break;
      cum += h;
    }
    need -= cum;
    for (std::size_t c = 0; c < chunks; ++c)
      for (std::uint32_t j = bin + 1; j < bins; ++j) ws.n_gt[c] += ws.hist[c * stride + j];
    prefix |= bin << shift;
    mask |= (bins - 1) << shift;
    last_bin = bin;
  }
  for (std::size_t c = 0; c < chunks; ++c) ws.n_eq[c] = ws.hist[c * stride + last_bin];
  return {static_cast<std::int64_t>(prefix), need};
}

/// Writes the elements selected by `thr` in index order, given each chunk's counts in n_gt/n_eq.
template <Element T, class Index>
void emit_threshold(std::span<T const> in, select_workspace<T>& ws, std::size_t chunks, top_k_threshold const& thr,
                    std::span<Index> idx, std::span<T> val) {
  std::size_t ties = thr.ties, total = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    ws.quota[c] = std::min(ties, ws.n_eq[c]);
    ties -= ws.quota[c];
    ws.offset[c] = total;
    total += ws.n_gt[c] + ws.quota[c];
  }
  std::size_t const n = in.size();
  for_chunks(chunks, [&](std::size_t c) {
    std::size_t const b = chunk_begin(c, chunks, n), e = chunk_begin(c + 1, chunks, n);
    std::size_t o = ws.offset[c], q = ws.quota[c];
    T const* SLUICE_RESTRICT x = in.data();
    for (std::size_t i = b; i < e; ++i) {
      std::int64_t const key = magnitude_key(x[i]);
      if (key > thr.key || (key == thr.key && q > 0)) {
        if (key == thr.key) --q;
        idx[o] = static_cast<Index>(i);
        val[o++] = x[i];
      }
    }
  });
}

/// Sizes the per-chunk bookkeeping of `ws` for `chunks` chunks.
template <Element T>
void prepare_chunks(select_workspace<T>& ws, std::size_t chunks) {
  for (auto* v : {&ws.n_above, &ws.n_cand, &ws.n_gt, &ws.n_eq, &ws.quota, &ws.offset}) grow(*v, chunks);
}

/// Exact top-k of `in` by magnitude_key, ties broken by lower index: writes the k selected
/// indices in increasing order to idx[0, k) and their values to val[0, k), and returns the
/// threshold that describes the selection. k <= in.size() < 2^32; idx and val hold >= k entries.
/// Reads the data once plus a strided sample when the sample brackets the threshold (the usual
/// case), four times otherwise. Deterministic: the result does not depend on the thread count.
template <Element T, class Index>
top_k_threshold select_top_k(std::span<T const> in, std::size_t k, select_workspace<T>& ws, std::span<Index> idx,
                             std::span<T> val) {
  std::size_t const n = in.size();
  ws.used_radix = false;
  if (k == 0) return {};
  if (k >= n) {
    for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<Index>(i), val[i] = in[i];
    return {0, n};
  }
  std::size_t const chunks = select_chunks(n);
  prepare_chunks(ws, chunks);
  constexpr std::size_t min_sampled = std::size_t{1} << 15;
  if (n >= min_sampled && !ws.force_radix) {
    // Sample size: sampling and ranking cost ~m (serial), the candidate band ~sqrt(n k / m); the
    // sum is smallest near m ~ (n k)^(1/3) (4x that, within [2^12, 2^15], measured best here).
    double const m_best = 4.0 * std::cbrt(static_cast<double>(n) * static_cast<double>(k));
    std::size_t const m = std::min<std::size_t>(
        n / 32, std::clamp<std::size_t>(static_cast<std::size_t>(m_best), std::size_t{1} << 12, std::size_t{1} << 15));
    std::size_t const step = n / m;
    // Sample (one cache miss per key) and the two ranks, each split over the threads; the second
    // rank works on a copy.
    grow(ws.sample, 2 * m);
    std::span<std::int32_t> s(ws.sample.data(), m), s2(ws.sample.data() + m, m);
    for_chunks(chunks, [&](std::size_t c) {
      for (std::size_t j = c * m / chunks; j < (c + 1) * m / chunks; ++j) {
        s[j] = magnitude_key(in[j * step + step / 2]);
        s2[j] = s[j];
      }
    });
    // The sample rank of the threshold is Binomial(m, k/n): bracket it by ~5 standard deviations.
    double const r = static_cast<double>(k) * static_cast<double>(m) / static_cast<double>(n);
    double const delta = 5.0 * std::sqrt(r + 1.0) + 2.0;
    double const r_hi = std::floor(r - delta), r_lo = std::ceil(r + delta);
    std::int32_t hi = std::numeric_limits<std::int32_t>::max(), lo = 0;
    for_chunks(2, [&](std::size_t task) {
      if (task == 0) {
        if (r_hi >= 0)
          hi = key_at_rank(s, static_cast<std::size_t>(r_hi));
        else if (r >= 16.0)  // the sample's largest: ~n/m elements above it, all selected (P(more than k) < e^-16)
          hi = *std::max_element(s.begin(), s.end());
      } else if (r_lo < static_cast<double>(m)) {
        lo = key_at_rank(s2, static_cast<std::size_t>(r_lo));
      }
    });
    // Capacities from the bracket with 50% headroom; a chunk may hold all of them (gradients are
    // far from uniform across a bucket).
    double const per = static_cast<double>(n) / static_cast<double>(m);
    auto const expect_cand = static_cast<std::size_t>((r_lo - std::max(0.0, r_hi) + 1.0) * per * 1.5) + 1024;
    std::size_t const chunk_len = n / chunks + 1;
    ws.cap_cand = std::min(std::min(k, chunk_len) + expect_cand, chunk_len);
    grow(ws.cand, chunks * list_stride(ws.cap_cand));
    filter_band(in, ws, chunks, lo, hi);
    std::size_t a = 0, d = 0;
    bool overflow = false;
    for (std::size_t c = 0; c < chunks; ++c) {
      a += ws.n_above[c];
      d += ws.n_cand[c];
      overflow |= ws.n_cand[c] > ws.cap_cand;
    }
    if (!overflow && a <= k && k <= d) {
      top_k_threshold thr{hi, 0};  // nothing from the band: exactly the entries above hi
      if (a == k)
        plan_output(ws, chunks, thr);
      else
        thr = band_threshold(ws, chunks, k);
      emit_entries(ws, chunks, thr, idx, val);
      return thr;
    }
  }
  ws.used_radix = true;
  top_k_threshold const thr = radix_threshold(in, k, ws, chunks);
  emit_threshold(in, ws, chunks, thr, idx, val);
  return thr;
}

}  // namespace sluice::detail::compress

// The instances sluice::kernels compiles once (extern template with SLUICE_SEPARATE_KERNELS).
#include <sluice/compress/detail/instances.hpp>
