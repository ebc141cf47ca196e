// The frame of element-sparse codecs (top_k, threshold_top_k): section 0 holds the kept values as
// T, section 1 their strictly increasing indices as first value + gaps in LEB128 varints.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include <sluice/compress/detail/common.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/core/varint.hpp>
#include <sluice/core/wire.hpp>

namespace sluice::detail::compress {

/// Exact frame size bound for `count` kept elements of `value_bytes` each out of n.
constexpr std::size_t sparse_frame_bytes(std::size_t count, std::size_t n, std::size_t value_bytes) noexcept {
  return sluice::wire::frame_bytes({count * value_bytes, sluice::wire::max_index_bytes(count, n)});
}

/// Writes a sparse frame of the given indices (strictly increasing, < n) and values. `out` must
/// hold sparse_frame_bytes(count, n, sizeof(T)) bytes (checked by the caller before selection).
template <Element T>
std::size_t write_sparse_frame(sluice::wire::codec_id id, encode_context const& ctx, std::size_t n,
                               std::span<std::uint32_t const> idx, std::span<T const> val, std::span<std::byte> out) {
  sluice::wire::writer w(out, make_header<T>(id, ctx, n));
  w.write(std::as_bytes(val));
  std::size_t const ib = sluice::wire::encode_sorted_indices<std::uint32_t>(idx, w.next());
  w.commit(ib);
  return w.finish();
}

/// A validated sparse frame: `count` indices decoded into caller scratch, values still as bytes.
struct sparse_frame_view {
  std::size_t count = 0;
  std::size_t extent = 0;
  std::span<std::byte const> values;  ///< count * sizeof(T) bytes, possibly unaligned
};

/// Parses and fully validates a sparse frame for a dense tensor of `extent` elements (any_extent:
/// the frame's own, below 2^32), decoding the indices into `idx` (grown as needed).
/// errc::malformed_message on any inconsistency.
template <Element T>
sparse_frame_view read_sparse_frame(std::span<std::byte const> msg, sluice::wire::codec_id id, std::size_t extent,
                                    std::vector<std::uint32_t>& idx, std::string_view codec,
                                    encode_context const& ctx) {
  sluice::wire::frame const f = parse_frame<T>(msg, id, extent, 2, ctx);
  extent = checked_extent(f, codec);
  auto const vals = f.sections[0];
  require(vals.size() % sizeof(T) == 0, errc::malformed_message,
          "{}: values section of {} bytes is not a multiple of {}", codec, vals.size(), sizeof(T));
  std::size_t const count = vals.size() / sizeof(T);
  require(count <= extent, errc::malformed_message, "{}: {} values for a tensor of {} elements", codec, count, extent);
  grow(idx, count);
  sluice::wire::decode_sorted_indices<std::uint32_t>(f.sections[1], extent,
                                                     std::span<std::uint32_t>(idx.data(), count));
  return {count, extent, vals};
}

/// Loads value j of a values section.
template <Element T>
inline T load_value(std::span<std::byte const> vals, std::size_t j) noexcept {
  T v;
  std::memcpy(&v, vals.data() + j * sizeof(T), sizeof(T));
  return v;
}

/// Writes a validated sparse frame into `dense`: zero-fill then set (overwrite) or add (accumulate).
template <Element T, DecodeMode M>
void apply_sparse(sparse_frame_view const& f, std::span<std::uint32_t const> idx, std::span<T> dense, M,
                  float scale = 1.0f) {
  constexpr bool add = M::accumulates;
  if constexpr (!add) std::fill(dense.begin(), dense.end(), T(0.0f));
  auto const ix = idx.first(f.count);
  for (std::size_t j = 0; j < f.count; ++j) {
    sluice::detail::prefetch_scatter(ix, j, 1, dense.data());
    float const v = to_float(load_value<T>(f.values, j)) * scale;
    T& d = dense[ix[j]];
    if constexpr (add)
      d = from_float<T>(to_float(d) + v);
    else
      d = from_float<T>(v);
  }
}

/// Copies a validated sparse frame into a sparse_buffer (block size 1).
template <Element T>
void to_sparse_buffer(sparse_frame_view const& f, std::span<std::uint32_t const> idx, std::size_t extent,
                      sparse_buffer<T>& out, float scale = 1.0f) {
  out.reset(extent, 1);
  out.resize_for_overwrite(f.count);
  auto oi = out.indices();
  auto ov = out.values();
  std::copy_n(idx.begin(), f.count, oi.begin());
  if (scale == 1.0f) {
    if (f.count != 0) std::memcpy(ov.data(), f.values.data(), f.count * sizeof(T));
  } else {
    for (std::size_t j = 0; j < f.count; ++j) ov[j] = from_float<T>(to_float(load_value<T>(f.values, j)) * scale);
  }
}

}  // namespace sluice::detail::compress
