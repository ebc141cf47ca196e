// Sparse reduce-scatter by index range, then allgather of the reduced ranges: rank j owns indices
// [n j / N, n (j+1) / N) and receives only the entries that fall there, so what one rank sends in the
// reduce phase is its own k entries whatever N is (unlike the allgather, where it grows as (N-1) k).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <sluice/collective/concepts.hpp>
#include <sluice/collective/sparse_allgather.hpp>
#include <sluice/core/varint.hpp>

namespace sluice {

/// Buffers reused across calls. Thread-safety: one workspace per concurrent call.
template <class C>
struct reduce_scatter_workspace {
  allgather_workspace<C> ag{};  ///< codec workspaces, own message, merge scratch
  sparse_buffer<float> mine{};  ///< this rank's decoded contribution
  std::vector<std::vector<std::byte>> send{};
  std::vector<std::vector<std::byte>> recv{};
  std::vector<sparse_buffer<float>> parts{};   ///< rank j's entries in my range
  std::vector<sparse_buffer<float>> ranges{};  ///< the reduced range of rank j
  sparse_buffer<float> reduced{};
  std::vector<std::uint8_t> arrived{};
  std::size_t sent_bytes = 0;  ///< bytes this rank sent in the last call
};

namespace detail {

/// A collective-internal sparse frame: [0] block size (u64), [1] varint block indices, [2] fp32 values.
inline void write_sparse_frame(std::vector<std::byte>& out, std::span<std::uint32_t const> idx,
                               std::span<float const> val, std::size_t block, wire::header const& h) {
  out.resize(wire::frame_bytes({8, wire::max_index_bytes(idx.size(), h.extent), val.size() * 4}));
  wire::writer w(out, h);
  std::uint64_t const b = block;
  wire::write_array(w, std::span<std::uint64_t const>(&b, 1));
  w.commit(wire::encode_sorted_indices(idx, w.next()));
  wire::write_array(w, val);
  out.resize(w.finish());
}

/// Reads a frame written by write_sparse_frame; every index must lie in blocks [lo, hi).
inline void read_sparse_frame(wire::frame const& f, std::size_t extent, std::size_t block, std::size_t lo,
                              std::size_t hi, sparse_buffer<float>& out) {
  std::uint64_t b = 0;
  wire::read_array(f.section(0), std::span<std::uint64_t>(&b, 1), "block size");
  require(b == block, errc::malformed_message, "block size {} where {} was expected", b, block);
  auto vals = f.section(2);
  require(vals.size() % (4 * block) == 0, errc::malformed_message, "values section of {} bytes for block size {}",
          vals.size(), block);
  std::size_t const nnz = vals.size() / (4 * block);
  out.reset(extent, block);
  out.resize(nnz);
  wire::decode_sorted_indices(f.section(1), hi, out.indices());
  require(nnz == 0 || out.indices()[0] >= lo, errc::malformed_message, "index {} below the range [{}, {})",
          nnz ? out.indices()[0] : 0u, lo, hi);
  wire::read_array(vals, out.values(), "values");
}

}  // namespace detail

namespace detail {

/// The collective with two hooks for work that overlaps the wire: `idle()` runs once the reduce
/// phase's messages are on their way, `range_ready(j)` as soon as ws.ranges[j] is final.
template <Transport T, class C, class Idle, class RangeReady>
void sparse_reduce_scatter_core(T& t, C const& codec, std::span<float const> in, collective_context const& ctx,
                                reduce_scatter_workspace<C>& ws, sparse_allgather_options const& opt, Idle&& idle,
                                RangeReady&& range_ready) {
  char const* const what = "sparse_reduce_scatter";
  int const world = t.size(), r = t.rank();
  auto const w = static_cast<std::size_t>(world), ur = static_cast<std::size_t>(r);
  std::size_t const n = in.size();
  deadline const d = deadline::after(ctx.timeout);
  ws.send.resize(w);
  ws.recv.resize(w);
  ws.parts.resize(w);
  ws.ranges.resize(w);
  ws.sent_bytes = 0;
  ws.ag.messages.resize(1);
  // What the others would decode from my message: encode, then decode locally.
  detail::encode_into(codec, in, detail::encode_ctx(ctx, r), ws.ag.encode, ws.ag.messages[0]);
  codec.decode_sparse(std::span<std::byte const>(ws.ag.messages[0]), detail::encode_ctx(ctx, r), ws.ag.decode, ws.mine);
  std::size_t const block = ws.mine.block_size();
  std::size_t const blocks = (n + block - 1) / block;
  wire::header const head{.codec = wire::codec_id::sparse,
                          .element = element_type::f32,
                          .flags = 0,
                          .tensor = ctx.tensor,
                          .step = ctx.step,
                          .extent = n};
  wire::expectation const expect{.codec = wire::codec_id::sparse,
                                 .element = element_type::f32,
                                 .tensor = ctx.tensor,
                                 .step = ctx.step,
                                 .extent = n,
                                 .sections = 3};
  auto idx = ws.mine.indices();
  auto val = ws.mine.values();
  auto cut = [&](std::size_t j) {
    auto const lo = static_cast<std::uint32_t>(detail::part_begin(blocks, w, j));
    return static_cast<std::size_t>(std::lower_bound(idx.begin(), idx.end(), lo) - idx.begin());
  };
  // Reduce phase: my entries in range j go to rank j.
  std::vector<typename T::request> reqs;
  reqs.reserve(2 * w);
  for (std::size_t k = 1; k <= w; ++k) {  // right neighbour first, mine last
    std::size_t const j = (ur + k) % w;
    std::size_t const a = cut(j), b = j + 1 == w ? idx.size() : cut(j + 1);
    if (j == ur) {
      ws.parts[ur].reset(n, block);
      ws.parts[ur].resize(b - a);
      std::copy(idx.begin() + static_cast<std::ptrdiff_t>(a), idx.begin() + static_cast<std::ptrdiff_t>(b),
                ws.parts[ur].indices().begin());
      std::copy(val.begin() + static_cast<std::ptrdiff_t>(a * block),
                val.begin() + static_cast<std::ptrdiff_t>(b * block), ws.parts[ur].values().begin());
      continue;
    }
    detail::write_sparse_frame(ws.send[j], idx.subspan(a, b - a), val.subspan(a * block, (b - a) * block), block, head);
    reqs.push_back(detail::start_send(t, static_cast<int>(j), ctx.tag, ws.send[j], what, ctx));
    ws.sent_bytes += ws.send[j].size();
  }
  idle();
  std::size_t const lo = detail::part_begin(blocks, w, ur), hi = detail::part_begin(blocks, w, ur + 1);
  ws.ag.sum.reset(n, opt.dense_above);
  for (std::size_t j = 0; j < w; ++j) {  // added in rank order as the parts arrive
    if (j != ur) {
      auto f = detail::recv_frame(t, static_cast<int>(j), ctx.tag, ws.recv[j], d, expect, what, ctx);
      try {
        detail::read_sparse_frame(f, n, block, lo, hi, ws.parts[j]);
      } catch (error const& e) {
        detail::rethrow_with(e, what, ctx, r, static_cast<int>(j));
      }
    }
    ws.ag.sum.add(ws.parts[j]);
  }
  ws.ag.sum.finish(ws.reduced);
  for (auto& q : reqs) detail::wait_send(t, q, -1, d, what, ctx);
  reqs.clear();
  // Allgather phase: my reduced range around the ring; everyone (me too) reads the same bytes, as
  // each range arrives (ranges are disjoint, so order is free).
  detail::write_sparse_frame(ws.recv[ur], ws.reduced.indices(), ws.reduced.values(), block, head);
  ws.sent_bytes += detail::ring_allgather(
      t, ws.recv, ws.arrived, ctx.tag + 1, false, ctx, d, what, [&](std::size_t) { return expect; }, [] {},
      [&](std::size_t j) {
        std::size_t const jlo = detail::part_begin(blocks, w, j), jhi = detail::part_begin(blocks, w, j + 1);
        try {
          detail::read_sparse_frame(wire::parse(ws.recv[j], expect), n, block, jlo, jhi, ws.ranges[j]);
        } catch (error const& e) {
          detail::rethrow_with(e, what, ctx, r, static_cast<int>(j));
        }
        range_ready(j);
      });
}

}  // namespace detail

/// Core of the collective: on return ws.ranges[j] holds the reduced entries of range j on every rank.
template <Transport T, class C>
requires SparseCodec<C, float>
void sparse_reduce_scatter_ranges(T& t, C const& codec, std::span<float const> in, collective_context const& ctx,
                                  reduce_scatter_workspace<C>& ws, sparse_allgather_options const& opt = {}) {
  detail::sparse_reduce_scatter_core(
      t, codec, in, ctx, ws, opt, [] {}, [](std::size_t) {});
}

/// Sums the sparse codec's messages over ranks into `out` (dense). Every rank gets the same bits.
template <Transport T, class C>
requires SparseCodec<C, float>
void sparse_reduce_scatter(T& t, C const& codec, std::span<float const> in, std::span<float> out,
                           collective_context const& ctx, reduce_scatter_workspace<C>& ws,
                           sparse_allgather_options const& opt = {}) {
  require(out.size() == in.size(), errc::size_mismatch,
          "sparse_reduce_scatter: tensor {}: output of {} for input of {}", ctx.tensor, out.size(), in.size());
  // `in` is read only before idle(), so `out` may alias it; cleared and filled while bytes travel.
  detail::sparse_reduce_scatter_core(
      t, codec, in, ctx, ws, opt, [&] { std::fill(out.begin(), out.end(), 0.0f); },
      [&](std::size_t j) { scatter(std::as_const(ws.ranges[j]).view(), out, false); });
}

/// As above, into a sparse result (the ranges concatenated; sorted because ranges are ordered).
template <Transport T, class C>
requires SparseCodec<C, float>
void sparse_reduce_scatter(T& t, C const& codec, std::span<float const> in, sparse_buffer<float>& out,
                           collective_context const& ctx, reduce_scatter_workspace<C>& ws,
                           sparse_allgather_options const& opt = {}) {
  sparse_reduce_scatter_ranges(t, codec, in, ctx, ws, opt);
  std::size_t total = 0;
  for (auto const& part : ws.ranges) total += part.nnz();
  std::size_t const block = ws.ranges.empty() ? 1 : ws.ranges[0].block_size();
  out.reset(in.size(), block);
  out.resize(total);
  std::size_t k = 0;
  for (auto const& part : ws.ranges) {
    std::copy(part.indices().begin(), part.indices().end(), out.indices().begin() + static_cast<std::ptrdiff_t>(k));
    std::copy(part.values().begin(), part.values().end(),
              out.values().begin() + static_cast<std::ptrdiff_t>(k * block));
    k += part.nnz();
  }
}

}  // namespace sluice
