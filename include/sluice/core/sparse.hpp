// sparse_view: the sparse gradient vocabulary shared by codecs, collectives and optimizers —
// sorted unique indices, their values, and the dense extent they index into.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <sluice/config.hpp>
#include <sluice/core/concepts.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/simd.hpp>

namespace sluice {

/// A non-owning sparse tensor. With block_size == 1, `indices[j]` is an element index and
/// `values[j]` its value. With block_size == B > 1, `indices[j]` names the block of elements
/// [indices[j]*B, min((indices[j]+1)*B, extent)) and `values[j*B .. j*B+B)` holds that block;
/// entries of a partial last block that fall past `extent` are padding and are ignored.
/// Invariant (checked by validate()): indices strictly increasing and in range.
/// T may be const-qualified for read-only views.
template <class T, class Index = std::uint32_t>
struct sparse_view {
  static_assert(SparseIndex<Index>,
                "sluice::sparse_view<T, Index>: Index must be std::uint32_t or std::uint64_t (sluice::SparseIndex), "
                "the index widths of the wire format and the kernels; write sparse_view<T> for 32-bit indices, or "
                "sparse_view<T, std::uint64_t> for tensors of 2^32 elements or more");
  using value_type = std::remove_cv_t<T>;
  using index_type = Index;

  std::span<Index const> indices;  ///< strictly increasing; element or block indices
  std::span<T> values;             ///< indices.size() * block_size entries
  std::size_t extent = 0;          ///< number of elements of the dense tensor
  std::size_t block_size = 1;      ///< elements per index, >= 1

  /// Number of index entries (blocks or elements).
  [[nodiscard]] constexpr std::size_t nnz() const noexcept { return indices.size(); }
  /// Number of blocks the dense extent is divided into.
  [[nodiscard]] constexpr std::size_t block_count() const noexcept {
    return block_size == 0 ? 0 : (extent + block_size - 1) / block_size;
  }

  /// Implicit conversion to a read-only view.
  constexpr operator sparse_view<T const, Index>() const noexcept requires(!std::is_const_v<T>) {
    return {indices, values, extent, block_size};
  }

  /// Throws errc::invalid_argument or errc::size_mismatch when the invariant does not hold.
  /// `what` names the tensor in the message. O(nnz).
  void validate(std::string_view what = "sparse_view") const {
    require(block_size >= 1, errc::invalid_argument, "{}: block_size must be >= 1", what);
    require(values.size() == indices.size() * block_size, errc::size_mismatch,
            "{}: {} values for {} indices of block size {}", what, values.size(), indices.size(), block_size);
    std::size_t const limit = block_count();
    for (std::size_t j = 0; j < indices.size(); ++j) {
      if (indices[j] >= limit) [[unlikely]]
        throw_error(errc::invalid_argument, "{}: index {} at position {} is out of range [0, {})", what,
                    static_cast<std::uint64_t>(indices[j]), j, limit);
      if (j > 0 && indices[j - 1] >= indices[j]) [[unlikely]]
        throw_error(errc::invalid_argument, "{}: indices not strictly increasing at position {} ({} after {})", what, j,
                    static_cast<std::uint64_t>(indices[j]), static_cast<std::uint64_t>(indices[j - 1]));
    }
  }
};

namespace detail {

/// std::allocator whose value-less construct default-initializes: a vector of trivial elements
/// then grows without writing zeros (sparse_buffer::resize_for_overwrite).
template <class T>
struct default_init_allocator : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = default_init_allocator<U>;
  };
  default_init_allocator() = default;
  template <class U>
  constexpr default_init_allocator(default_init_allocator<U> const&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    std::construct_at(p, std::forward<Args>(args)...);
  }
};

}  // namespace detail

/// Owning storage for a sparse tensor; capacity grows only on demand, so a buffer reused with
/// the same or smaller nnz never reallocates.
template <class T, class Index = std::uint32_t>
class sparse_buffer {
  static_assert(SparseIndex<Index>,
                "sluice::sparse_buffer<T, Index>: Index must be std::uint32_t or std::uint64_t (sluice::SparseIndex), "
                "the index widths of the wire format and the kernels; write sparse_buffer<T> for 32-bit indices, or "
                "sparse_buffer<T, std::uint64_t> for tensors of 2^32 elements or more");

 public:
  sparse_buffer() = default;
  sparse_buffer(std::size_t extent, std::size_t block_size = 1) : extent_(extent), block_size_(block_size) {
    require(block_size >= 1, errc::invalid_argument, "sparse_buffer: block_size must be >= 1");
  }

  /// Sets the number of entries; contents of new entries are value-initialized.
  void resize(std::size_t nnz) {
    indices_.resize(nnz, Index{});
    values_.resize(nnz * block_size_, T{});
  }
  /// Sets the number of entries, leaving new ones unwritten (indeterminate): for a caller that
  /// writes every index and value before anything reads them. Saves the zero-fill of resize.
  void resize_for_overwrite(std::size_t nnz) {
    indices_.resize(nnz);
    values_.resize(nnz * block_size_);
  }
  /// Ensures room for `nnz` entries without reallocating later.
  void reserve(std::size_t nnz) {
    indices_.reserve(nnz);
    values_.reserve(nnz * block_size_);
  }
  /// Changes the dense extent and block size; keeps capacity, empties the contents.
  void reset(std::size_t extent, std::size_t block_size = 1) {
    require(block_size >= 1, errc::invalid_argument, "sparse_buffer: block_size must be >= 1");
    extent_ = extent;
    block_size_ = block_size;
    indices_.clear();
    values_.clear();
  }

  [[nodiscard]] std::size_t nnz() const noexcept { return indices_.size(); }
  [[nodiscard]] std::size_t extent() const noexcept { return extent_; }
  [[nodiscard]] std::size_t block_size() const noexcept { return block_size_; }
  [[nodiscard]] std::span<Index> indices() noexcept { return indices_; }
  [[nodiscard]] std::span<Index const> indices() const noexcept { return indices_; }
  [[nodiscard]] std::span<T> values() noexcept { return values_; }
  [[nodiscard]] std::span<T const> values() const noexcept { return values_; }

  [[nodiscard]] sparse_view<T, Index> view() noexcept { return {indices_, values_, extent_, block_size_}; }
  [[nodiscard]] sparse_view<T const, Index> view() const noexcept { return {indices_, values_, extent_, block_size_}; }

  friend bool operator==(sparse_buffer const&, sparse_buffer const&) = default;

 private:
  std::vector<Index, detail::default_init_allocator<Index>> indices_;
  std::vector<T, detail::default_init_allocator<T>> values_;
  std::size_t extent_ = 0;
  std::size_t block_size_ = 1;
};

namespace detail {

/// How many entries ahead a scatter asks for its destination line. Sparse indices a few hundred
/// bytes apart defeat the hardware prefetcher, so each read-modify-write would otherwise wait on
/// memory one at a time. 128 measured best of 16-256 (docs/performance/collective.md, "Prefetch in
/// `scatter`").
inline constexpr std::size_t scatter_ahead = 128;

/// Requests, for writing, the first line of the destination of entry j + scatter_ahead (block size
/// b) of `idx`, if there is one. `idx` must hold indices valid for `dense` only.
template <class Index, class U>
inline void prefetch_scatter(std::span<Index const> idx, std::size_t j, std::size_t b, U* dense) noexcept {
  if (j + scatter_ahead < idx.size())
    __builtin_prefetch(dense + static_cast<std::size_t>(idx[j + scatter_ahead]) * b, 1, 3);
}

}  // namespace detail

/// Scatters a sparse view into a dense span: dense[i] = value (add false; other entries untouched)
/// or dense[i] += value (add true). Validates sizes; indices are assumed validated.
template <class T, SparseIndex Index, class U>
void scatter(sparse_view<T const, Index> s, std::span<U> dense, bool add) {
  require(dense.size() == s.extent, errc::size_mismatch, "scatter: dense size {} != extent {}", dense.size(), s.extent);
  std::size_t const b = s.block_size;
  for (std::size_t j = 0; j < s.indices.size(); ++j) {
    detail::prefetch_scatter(s.indices, j, b, dense.data());
    std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b;
    std::size_t const len = std::min(b, s.extent - base);
    for (std::size_t e = 0; e < len; ++e) {
      if (add)
        dense[base + e] = static_cast<U>(static_cast<float>(dense[base + e]) + static_cast<float>(s.values[j * b + e]));
      else
        dense[base + e] = static_cast<U>(s.values[j * b + e]);
    }
  }
}

namespace detail {

/// Ranges of at least this many bytes are densified with streaming (non-temporal) stores: each
/// tile is built in an L1 scratch and written out whole, so the range's lines are never read for
/// ownership first (half the memory traffic of clearing them in place). A range of a core's L2
/// or more does not stay close to the caller anyway (the reduce-scatter writes 2^24 floats in
/// ranges of 2-16 MiB); smaller ones are written in place and stay cached.
inline constexpr std::size_t densify_stream_bytes = std::size_t{1} << 20;

/// stream_lines at level L (core/detail/stream_body.hpp, stamped below).
template <sluice::simd L>
struct stream_lanes;

}  // namespace detail
}  // namespace sluice

#define SLUICE_SIMD_BODY <sluice/core/detail/stream_body.hpp>
#include <sluice/core/detail/simd_stamp.hpp>

namespace sluice {
namespace detail {

/// Copies `bytes` (a multiple of 64) from the 64-byte-aligned `src` to the 64-byte-aligned `dst`
/// with non-temporal stores where the target has them (stream_fence() before anyone else reads
/// `dst`), plain stores elsewhere.
inline void stream_lines(std::byte* SLUICE_RESTRICT dst, std::byte const* SLUICE_RESTRICT src,
                         std::size_t bytes) noexcept {
  detail::simd::dispatch([&](auto l) { stream_lanes<decltype(l)::value>::copy(dst, src, bytes); });
}

/// Orders the streaming stores issued so far before any later store (x86 `sfence`): run on every
/// way out of a function that streamed, exceptions included.
struct stream_fence {
  stream_fence() = default;
  stream_fence(stream_fence const&) = delete;
  stream_fence& operator=(stream_fence const&) = delete;
  ~stream_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
  }
};

/// Walks the entries of `s` in order and writes the elements of the dense form that fall in a
/// window [t0, t1) into out[i - t0] (which the caller has zeroed), window after window; a block
/// may straddle two windows. Checks that every index follows the one before.
template <class T, SparseIndex Index, class U>
struct densify_cursor {
  sparse_view<T const, Index> s;
  std::size_t pos;    ///< end of the last block written whole
  std::size_t j = 0;  ///< next entry
  std::size_t e = 0;  ///< its first element not yet written

  void write(U* out, std::size_t t0, std::size_t t1) {
    std::size_t const b = s.block_size;
    if (b == 1) {  // element indices: the common case, a few instructions an entry
      std::size_t const n = s.indices.size();
      Index const* SLUICE_RESTRICT ix = s.indices.data();
      T const* SLUICE_RESTRICT v = s.values.data();
      std::size_t jj = j, p = pos;
      for (; jj < n; ++jj) {
        auto const i = static_cast<std::size_t>(ix[jj]);
        if (i >= t1) break;
        if (i < p) [[unlikely]] {
          j = jj;
          throw_error(errc::invalid_argument, "densify: index {} at position {} is not past the one before", i, jj);
        }
        out[i - t0] = static_cast<U>(v[jj]);
        p = i + 1;
      }
      j = jj;
      pos = p;
      return;
    }
    while (j < s.indices.size()) {
      std::size_t const base = static_cast<std::size_t>(s.indices[j]) * b;
      if (base + e >= t1) return;
      if (e == 0)
        require(base >= pos, errc::invalid_argument, "densify: index {} at position {} is not past the one before",
                static_cast<std::size_t>(s.indices[j]), j);
      std::size_t const end = base + std::min(b, s.extent - base), stop = std::min(end, t1);
      for (std::size_t k = base + e; k < stop; ++k) out[k - t0] = static_cast<U>(s.values[j * b + (k - base)]);
      if (stop < end) {
        e = stop - base;
        return;
      }
      pos = end;
      ++j;
      e = 0;
    }
  }

  /// Zeroes again what write(out, t0, t1) wrote, given the cursor (j0, e0) it started from.
  void unwrite(U* out, std::size_t t0, std::size_t t1, std::size_t j0, std::size_t e0) const {
    std::size_t const b = s.block_size;
    if (b == 1) {
      for (std::size_t jj = j0; jj < j; ++jj) out[static_cast<std::size_t>(s.indices[jj]) - t0] = U{};
      return;
    }
    for (std::size_t jj = j0; jj < s.indices.size() && jj <= j; ++jj) {
      std::size_t const base = static_cast<std::size_t>(s.indices[jj]) * b;
      if (base >= t1) return;
      std::size_t const lo = std::max(base + (jj == j0 ? e0 : 0), t0),
                        hi = std::min(base + std::min(b, s.extent - base), t1);
      for (std::size_t k = lo; k < hi; ++k) out[k - t0] = U{};
    }
  }
};

/// densify over elements [first, last), with streaming stores for the 64-byte-aligned tiles when
/// `stream` (and U fits a cache line a whole number of times).
template <class T, SparseIndex Index, class U>
void densify_elements(sparse_view<T const, Index> s, U* d, std::size_t first, std::size_t last, bool stream) {
  constexpr std::size_t tile = (std::size_t{16} << 10) / sizeof(U);  // about 16 KiB, L1-resident
  densify_cursor<T, Index, U> cur{s, first};
  auto in_place = [&](std::size_t t0, std::size_t t1) {
    for (; t0 < t1; t0 += tile) {
      std::size_t const t = std::min(t0 + tile, t1);
      std::fill(d + t0, d + t, U{});
      cur.write(d + t0, t0, t);
    }
  };
  constexpr bool streamable = std::is_trivially_copyable_v<U> && 64 % sizeof(U) == 0;
  // [a, z): whole tiles from the first line boundary, streamed; the head before them and the tail
  // after them (everything, without streaming) are written in place.
  std::size_t a = first, z = first;
  if (streamable && stream) {
    auto const mis = reinterpret_cast<std::uintptr_t>(d + first) % 64;
    a = std::min(last, first + (64 - mis) % 64 / sizeof(U));
    z = a + (last - a) / tile * tile;
  }
  in_place(first, a);
  if constexpr (streamable) {
    if (z > a) {
      stream_fence const fence;
      alignas(64) U scratch[tile];
      std::fill(scratch, scratch + tile, U{});
      for (std::size_t t0 = a; t0 < z; t0 += tile) {
        std::size_t const j0 = cur.j, e0 = cur.e;
        cur.write(scratch, t0, t0 + tile);
        stream_lines(reinterpret_cast<std::byte*>(d + t0), reinterpret_cast<std::byte const*>(scratch), sizeof scratch);
        cur.unwrite(scratch, t0, t0 + tile, j0, e0);
      }
    }
  }
  in_place(z, last);
  require(cur.j == s.indices.size(), errc::invalid_argument, "densify: index {} at position {} is past the extent {}",
          cur.j < s.indices.size() ? static_cast<std::size_t>(s.indices[cur.j]) : 0, cur.j, s.extent);
}

/// densify (below), streaming when the range has at least `stream_bytes` bytes (tests take both
/// paths on small ranges).
template <class T, SparseIndex Index, class U>
void densify(sparse_view<T const, Index> s, std::span<U> dense, std::size_t first_block, std::size_t last_block,
             std::size_t stream_bytes) {
  require(dense.size() == s.extent, errc::size_mismatch, "densify: dense size {} != extent {}", dense.size(), s.extent);
  std::size_t const b = s.block_size;
  require(first_block <= last_block && first_block * b <= s.extent, errc::invalid_argument,
          "densify: blocks [{}, {}) of size {} for an extent of {}", first_block, last_block, b, s.extent);
  require(s.indices.empty() || (s.indices.front() >= first_block && s.indices.back() < last_block),
          errc::invalid_argument, "densify: indices [{}, {}] outside blocks [{}, {})",
          s.indices.empty() ? 0 : static_cast<std::size_t>(s.indices.front()),
          s.indices.empty() ? 0 : static_cast<std::size_t>(s.indices.back()), first_block, last_block);
  // last_block * b may not fit in size_t
  std::size_t const first = first_block * b, last = last_block >= s.block_count() ? s.extent : last_block * b;
  densify_elements(s, dense.data(), first, last, (last - first) * sizeof(U) >= stream_bytes);
}

}  // namespace detail

/// Writes blocks [first_block, last_block) of the dense form of `s` into `dense` in one forward
/// pass: the listed blocks' values, zero between them (elements past the extent are not written).
/// The same bits as zero-filling that range and then scattering `s` with overwrite, without a
/// second, random-access pass over it: the range is written a tile (about 16 KiB) at a time, and
/// that tile's entries are stored while it is in L1. Ranges of detail::densify_stream_bytes and
/// more build each tile in an L1 scratch and write it with streaming stores, so the range is not
/// read from memory first (the result is then not in cache). Every index of `s` must lie in the
/// range and follow the one before (checked; errc::invalid_argument; `dense` may then be partly
/// written).
template <class T, SparseIndex Index, class U>
void densify(sparse_view<T const, Index> s, std::span<U> dense, std::size_t first_block, std::size_t last_block) {
  detail::densify(s, dense, first_block, last_block, detail::densify_stream_bytes);
}

}  // namespace sluice
