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
#include <sluice/collective/detail/exchange.hpp>
#include <sluice/collective/detail/message.hpp>
#include <sluice/collective/sparse_allgather.hpp>
#include <sluice/core/varint.hpp>

namespace sluice {

/// Buffers reused across calls. Thread-safety: one workspace per concurrent call.
template <class C>
struct sparse_reduce_scatter_workspace {
  /// What this rank sends in the reduce phase of one chunk (made on the helper thread when chunked).
  struct chunk_part {
    sparse_buffer<float> mine{};                 ///< this rank's decoded contribution
    std::vector<std::vector<std::byte>> send{};  ///< the frame of its entries for rank j
    std::size_t own_begin = 0, own_end = 0;      ///< its entries in this rank's own range
  };
  sparse_allgather_workspace<C> ag{};  ///< codec workspaces, own messages, merge scratch
  std::vector<chunk_part> chunk{};
  std::vector<std::vector<std::byte>> recv{};
  std::vector<sparse_buffer<float>> parts{};   ///< rank j's entries in my range
  std::vector<sparse_buffer<float>> ranges{};  ///< the reduced range of rank j (of the current chunk)
  sparse_buffer<float> reduced{};
  std::vector<std::uint8_t> arrived{};
  std::size_t sent_bytes = 0;  ///< bytes this rank sent in the last call
};

/// The former name (sluice 0.1); it goes in the next minor version.
template <class C>
using reduce_scatter_workspace [[deprecated("renamed sluice::sparse_reduce_scatter_workspace")]] =
    sparse_reduce_scatter_workspace<C>;

namespace detail {

/// A collective-internal sparse frame: [0] block size (u64), [1] varint block indices, [2] fp32 values.
inline void write_sparse_frame(std::vector<std::byte>& out, std::span<std::uint32_t const> idx,
                               std::span<float const> val, std::size_t block, sluice::wire::header const& h) {
  std::size_t const most =
      sluice::wire::frame_bytes({8, sluice::wire::max_index_bytes(idx.size(), h.extent), val.size() * 4});
  out.reserve(most + message_id_bytes);
  out.resize(most);
  sluice::wire::writer w(out, h);
  std::uint64_t const b = block;
  sluice::wire::write_array(w, std::span<std::uint64_t const>(&b, 1));
  w.commit(sluice::wire::encode_sorted_indices(idx, w.next()));
  sluice::wire::write_array(w, val);
  out.resize(w.finish());
}

/// Reads a frame written by write_sparse_frame; every index must lie in blocks [lo, hi).
inline void read_sparse_frame(sluice::wire::frame const& f, std::size_t extent, std::size_t block, std::size_t lo,
                              std::size_t hi, sparse_buffer<float>& out) {
  std::uint64_t b = 0;
  sluice::wire::read_array(f.section(0), std::span<std::uint64_t>(&b, 1), "block size");
  require(b == block, errc::malformed_message, "block size {} where {} was expected", b, block);
  auto vals = f.section(2);
  require(vals.size() % (4 * block) == 0, errc::malformed_message, "values section of {} bytes for block size {}",
          vals.size(), block);
  std::size_t const nnz = vals.size() / (4 * block);
  out.reset(extent, block);
  out.resize_for_overwrite(nnz);
  sluice::wire::decode_sorted_indices(f.section(1), hi, out.indices());
  require(nnz == 0 || out.indices()[0] >= lo, errc::malformed_message, "index {} below the range [{}, {})",
          nnz ? out.indices()[0] : 0u, lo, hi);
  sluice::wire::read_array(vals, out.values(), "values");
}

}  // namespace detail

namespace detail {

/// The collective, chunk by chunk (opt.chunk_elements; detail::overlap_chunks): the encode, the
/// local decode and the reduce-phase frames of chunk c + 1 are made on a helper thread while chunk
/// c is exchanged. The caller's output is written by `range_ready(c, j, lo, hi)`, called as soon as
/// ws.ranges[j] holds the final sum of rank j's range of chunk c: blocks [lo, hi) of the chunk (its
/// block indices are relative to the chunk). Chunk c of `in` has been read by then.
template <Transport T, class C, class RangeReady>
void sparse_reduce_scatter_core(T& t, C const& codec, std::span<float const> in, collective_context const& ctx,
                                sparse_reduce_scatter_workspace<C>& ws, sparse_allgather_options const& opt,
                                RangeReady&& range_ready) {
  char const* const what = "sparse_reduce_scatter";
  int const world = t.size(), r = t.rank();
  auto const w = static_cast<std::size_t>(world), ur = static_cast<std::size_t>(r);
  deadline const d = deadline::after(ctx.timeout);
  detail::chunking const ch(in.size(), opt.chunk_elements);
  ws.chunk.resize(ch.count);
  ws.ag.own.resize(ch.count);
  ws.recv.resize(w);
  ws.parts.resize(w);
  ws.ranges.resize(w);
  ws.sent_bytes = 0;
  auto head = [&](std::size_t n) {
    return sluice::wire::header{.codec = sluice::wire::codec_id::sparse,
                                .element = element_type::f32,
                                .flags = 0,
                                .tensor = ctx.tensor,
                                .step = ctx.step,
                                .extent = n};
  };
  auto blocks_of = [](std::size_t n, std::size_t block) { return (n + block - 1) / block; };
  // Reduce-phase frames: my entries in range j of the chunk go to rank j; those of my own range stay.
  auto prepare = [&](std::size_t c) {
    auto& cp = ws.chunk[c];
    std::size_t const n = ch.length(c);
    auto const ectx = detail::encode_ctx(ctx, r, ch.salt(c));
    // What the others would decode from my message: encode, then decode locally.
    detail::encode_into(codec, in.subspan(ch.begin(c), n), ectx, ws.ag.encode, ws.ag.own[c]);
    codec.decode_sparse(std::span<std::byte const>(ws.ag.own[c]), ectx, ws.ag.decode, cp.mine);
    std::size_t const block = cp.mine.block_size(), blocks = blocks_of(n, block);
    auto idx = std::as_const(cp.mine).indices();
    auto val = std::as_const(cp.mine).values();
    auto cut = [&](std::size_t j) {
      if (j == w) return idx.size();
      auto const lo = static_cast<std::uint32_t>(detail::part_begin(blocks, w, j));
      return static_cast<std::size_t>(std::lower_bound(idx.begin(), idx.end(), lo) - idx.begin());
    };
    cp.send.resize(w);
    for (std::size_t j = 0; j < w; ++j) {
      std::size_t const a = cut(j), b = cut(j + 1);
      if (j == ur) {
        cp.own_begin = a, cp.own_end = b;
        continue;
      }
      detail::write_sparse_frame(cp.send[j], idx.subspan(a, b - a), val.subspan(a * block, (b - a) * block), block,
                                 head(n));
      detail::stamp(cp.send[j], {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(c)});
    }
  };
  auto exchange = [&](std::size_t c) {
    auto& cp = ws.chunk[c];
    std::size_t const n = ch.length(c), block = cp.mine.block_size(), blocks = blocks_of(n, block);
    sluice::wire::expectation const expect{.codec = sluice::wire::codec_id::sparse,
                                           .element = element_type::f32,
                                           .tensor = ctx.tensor,
                                           .step = ctx.step,
                                           .extent = n,
                                           .sections = 3};
    detail::send_set<T> sends(t, w);
    for (std::size_t k = 1; k < w; ++k) {  // right neighbour first
      std::size_t const j = (ur + k) % w;
      sends.start(static_cast<int>(j), ctx.tag, cp.send[j], what, ctx);
      ws.sent_bytes += cp.send[j].size();
    }
    auto& own = ws.parts[ur];
    own.reset(n, block);
    own.resize_for_overwrite(cp.own_end - cp.own_begin);
    std::copy(cp.mine.indices().begin() + static_cast<std::ptrdiff_t>(cp.own_begin),
              cp.mine.indices().begin() + static_cast<std::ptrdiff_t>(cp.own_end), own.indices().begin());
    std::copy(cp.mine.values().begin() + static_cast<std::ptrdiff_t>(cp.own_begin * block),
              cp.mine.values().begin() + static_cast<std::ptrdiff_t>(cp.own_end * block), own.values().begin());
    std::size_t const lo = detail::part_begin(blocks, w, ur), hi = detail::part_begin(blocks, w, ur + 1);
    ws.ag.sum.reset(n, opt.dense_above);
    for (std::size_t j = 0; j < w; ++j) {  // added in rank order as the parts arrive
      if (j != ur) {
        auto f = detail::recv_frame(t, static_cast<int>(j), ctx.tag, ws.recv[j], d,
                                    {static_cast<std::uint32_t>(j), static_cast<std::uint32_t>(c)}, expect, what, ctx);
        try {
          detail::read_sparse_frame(f, n, block, lo, hi, ws.parts[j]);
        } catch (error const& e) {
          detail::rethrow_with(e, what, ctx, r, static_cast<int>(j));
        }
      }
      ws.ag.sum.add(ws.parts[j]);
    }
    ws.ag.sum.finish(ws.reduced);
    sends.wait_all(d, what, ctx);
    // Allgather phase: my reduced range around the ring; everyone (me too) reads the same bytes, as
    // each range arrives (ranges are disjoint, so order is free).
    detail::write_sparse_frame(ws.recv[ur], ws.reduced.indices(), ws.reduced.values(), block, head(n));
    ws.sent_bytes += detail::ring_allgather(
        t, ws.recv, ws.arrived, ctx.tag + 1, static_cast<std::uint32_t>(c), false, ctx, d, what,
        [&](std::size_t) { return expect; }, [] {},
        [&](std::size_t j) {
          std::size_t const jlo = detail::part_begin(blocks, w, j), jhi = detail::part_begin(blocks, w, j + 1);
          try {
            detail::read_sparse_frame(sluice::wire::parse(detail::frame_of(ws.recv[j]), expect), n, block, jlo, jhi,
                                      ws.ranges[j]);
          } catch (error const& e) {
            detail::rethrow_with(e, what, ctx, r, static_cast<int>(j));
          }
          range_ready(c, j, jlo, jhi);
        });
  };
  detail::overlap_chunks(ch.count, prepare, exchange);
}

}  // namespace detail

/// Sums the sparse codec's messages over ranks into `out` (dense). Every rank gets the same bits.
/// `in` and `out` may be the same span. `opt.chunk_elements` splits the tensor into chunks whose
/// encode overlaps the exchange of the previous one (as in sparse_allgather).
template <Transport T, class C>
requires SparseCodec<C, float>
void sparse_reduce_scatter(T& t, C const& codec, std::span<float const> in, std::span<float> out,
                           collective_context const& ctx, sparse_reduce_scatter_workspace<C>& ws,
                           sparse_allgather_options const& opt = {}) {
  require(out.size() == in.size(), errc::size_mismatch,
          "sparse_reduce_scatter: tensor {}: output of {} for input of {}", ctx.tensor, out.size(), in.size());
  detail::chunking const ch(in.size(), opt.chunk_elements);
  // Each range is written whole (its values and the zeros between them) in one forward pass as it
  // arrives; the ranges tile the chunk, so no clearing pass comes before them. Chunk c of `in` is
  // read by then, so `out` may alias it.
  detail::sparse_reduce_scatter_core(
      t, codec, in, ctx, ws, opt, [&](std::size_t c, std::size_t j, std::size_t lo, std::size_t hi) {
        densify(std::as_const(ws.ranges[j]).view(), out.subspan(ch.begin(c), ch.length(c)), lo, hi);
      });
}

/// As above, into a sparse result (the ranges of every chunk concatenated; sorted because chunks
/// and ranges are ordered). Chunks must then be a multiple of the codec's block size.
template <Transport T, class C>
requires SparseCodec<C, float>
void sparse_reduce_scatter(T& t, C const& codec, std::span<float const> in, sparse_buffer<float>& out,
                           collective_context const& ctx, sparse_reduce_scatter_workspace<C>& ws,
                           sparse_allgather_options const& opt = {}) {
  detail::chunking const ch(in.size(), opt.chunk_elements);
  std::size_t got = 0;  // ranges of the current chunk in so far
  detail::sparse_reduce_scatter_core(t, codec, in, ctx, ws, opt,
                                     [&](std::size_t c, std::size_t, std::size_t, std::size_t) {
                                       if (++got < ws.ranges.size()) return;
                                       got = 0;
                                       if (c == 0) out.reset(in.size(), ws.ranges[0].block_size());
                                       for (auto const& part : ws.ranges)
                                         detail::append_shifted(out, part, ch.begin(c), "sparse_reduce_scatter", ctx);
                                     });
}

}  // namespace sluice
