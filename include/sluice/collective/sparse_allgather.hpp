// Sparse allgather: every rank's encoded message reaches every rank unchanged, then every rank
// aggregates all N messages in rank order (StellaTrain's inter-cluster exchange, around a ring), so replicas agree
// bit for bit. Sparse results are a running sum (two-way merges as messages arrive, or a dense
// accumulator once dense enough).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include <sluice/collective/concepts.hpp>
#include <sluice/collective/detail/exchange.hpp>
#include <sluice/collective/detail/message.hpp>
#include <sluice/core/sparse.hpp>

namespace sluice {

/// Options of the sparse allgather.
struct sparse_allgather_options {
  /// Once the running sum covers more than this fraction of the blocks, it continues in a dense
  /// accumulator (same bits, less work per part at high density).
  double dense_above = 0.25;
  /// Elements per chunk; 0 keeps the tensor whole. Each chunk is encoded on its own (a top_k keeps
  /// its ratio of every chunk; random codecs draw chunk c from the stream salted with c + 1) and
  /// exchanged as one message per rank while a helper thread encodes the next chunk, so only the
  /// first chunk's encode stays off the wire (detail::overlap_chunks). A sparse result needs it to
  /// be a multiple of the codec's block size (errc::invalid_argument otherwise).
  std::size_t chunk_elements = 0;
  friend bool operator==(sparse_allgather_options const&, sparse_allgather_options const&) = default;
};

namespace detail {

/// Running sum of sparse parts with one extent and block size, added in rank order as each part
/// arrives, so the aggregation overlaps the wire instead of following it: a linear two-way merge
/// while the sum is sparse, a dense accumulator once the union of indices covers more than
/// `dense_above` of the blocks. Both forms compute 0 + v_0 + v_1 + ... per element in rank order,
/// so the result has the same bits whichever form (or switch point) was used.
class sparse_sum {
 public:
  void reset(std::size_t extent, double dense_above) {
    extent_ = extent;
    dense_above_ = dense_above;
    block_ = blocks_ = parts_ = 0;
    dense_mode_ = false;
  }

  /// Adds the next part in rank order; the first part fixes the block size.
  void add(sparse_buffer<float> const& p) {
    if (parts_++ == 0) {
      block_ = p.block_size();
      blocks_ = block_ == 0 ? 0 : (extent_ + block_ - 1) / block_;
      acc_.reset(extent_, block_);
      acc_.resize_for_overwrite(p.nnz());
      std::copy(p.indices().begin(), p.indices().end(), acc_.indices().begin());
      std::transform(p.values().begin(), p.values().end(), acc_.values().begin(), [](float v) { return 0.0f + v; });
    } else if (dense_mode_) {
      add_dense(p);
      return;
    } else {
      merge(p);
    }
    if (blocks_ > 0 && static_cast<double>(acc_.nnz()) > dense_above_ * static_cast<double>(blocks_)) to_dense();
  }

  /// Moves the sum (sorted unique indices) into `out`; the sum is empty afterwards.
  void finish(sparse_buffer<float>& out) {
    if (parts_ == 0) {
      out.reset(extent_, 1);
      return;
    }
    if (!dense_mode_) {
      std::swap(out, acc_);
      return;
    }
    std::size_t nnz = 0;
    for (auto m : marks_) nnz += m;
    out.reset(extent_, block_);
    out.resize_for_overwrite(nnz);
    std::size_t k = 0;
    for (std::size_t b = 0; b < blocks_; ++b) {
      if (!marks_[b]) continue;
      out.indices()[k] = static_cast<std::uint32_t>(b);
      for (std::size_t e = 0; e < block_; ++e)
        out.values()[k * block_ + e] = b * block_ + e < extent_ ? dense_[b * block_ + e] : 0.0f;
      ++k;
    }
  }

 private:
  void add_dense(sparse_buffer<float> const& p) {
    scatter(p.view(), std::span<float>(dense_), true);
    for (auto idx : p.indices()) marks_[idx] = 1;
  }

  void to_dense() {
    dense_mode_ = true;
    dense_.assign(extent_, 0.0f);
    marks_.assign(blocks_, 0);
    scatter(std::as_const(acc_).view(), std::span<float>(dense_), false);  // the sums so far, as they are
    for (auto idx : acc_.indices()) marks_[idx] = 1;
  }

  // acc_ + p into next_ (both sorted), then swapped: entries of p alone become 0 + v, as the
  // dense form's first addition makes them.
  void merge(sparse_buffer<float> const& p) {
    auto const& a = std::as_const(acc_);
    auto const ai = a.indices(), pi = p.indices();
    auto const av = a.values(), pv = p.values();
    std::size_t const b = block_;
    next_.reset(extent_, b);
    next_.resize_for_overwrite(ai.size() + pi.size());
    auto ni = next_.indices();
    auto nv = next_.values();
    std::size_t i = 0, j = 0, k = 0;
    if (b == 1) {
      // Element lists interleave at random: selects instead of branches while both have entries.
      while (i < ai.size() && j < pi.size()) {
        std::uint32_t const x = ai[i], y = pi[j];
        bool const ta = x <= y, tp = y <= x;
        float const va = av[i], vp = pv[j];
        float const both = va + vp, only_p = 0.0f + vp;
        nv[k] = ta ? (tp ? both : va) : only_p;
        ni[k] = ta ? x : y;
        i += ta;
        j += tp;
        ++k;
      }
    }
    while (i < ai.size() || j < pi.size()) {
      bool const take_a = j == pi.size() || (i < ai.size() && ai[i] <= pi[j]);
      bool const take_p = i == ai.size() || (j < pi.size() && pi[j] <= ai[i]);
      float* const dst = nv.data() + k * b;
      if (take_a && take_p) {
        for (std::size_t e = 0; e < b; ++e) dst[e] = av[i * b + e] + pv[j * b + e];
      } else if (take_a) {
        std::copy_n(av.data() + i * b, b, dst);
      } else {
        for (std::size_t e = 0; e < b; ++e) dst[e] = 0.0f + pv[j * b + e];
      }
      ni[k++] = take_a ? ai[i] : pi[j];
      i += take_a;
      j += take_p;
    }
    next_.resize_for_overwrite(k);
    std::swap(acc_, next_);
  }

  sparse_buffer<float> acc_{}, next_{};
  std::vector<float> dense_{};
  std::vector<std::uint8_t> marks_{};
  std::size_t extent_ = 0, block_ = 0, blocks_ = 0, parts_ = 0;
  double dense_above_ = 0.25;
  bool dense_mode_ = false;
};

/// Appends `part` (a sum over elements [first, first + part.extent()) of `out`'s tensor) to `out`,
/// its block indices shifted by first / block; `out` must end before `first`.
inline void append_shifted(sparse_buffer<float>& out, sparse_buffer<float> const& part, std::size_t first,
                           char const* what, collective_context const& ctx) {
  std::size_t const b = out.block_size();
  require(part.block_size() == b && first % b == 0, errc::invalid_argument,
          "{}: tensor {}: a chunk starting at element {} is not on a boundary of {}-element blocks", what, ctx.tensor,
          first, part.block_size());
  std::size_t const k = out.nnz();
  auto const shift = static_cast<std::uint32_t>(first / b);
  out.resize_for_overwrite(k + part.nnz());
  std::transform(part.indices().begin(), part.indices().end(), out.indices().begin() + static_cast<std::ptrdiff_t>(k),
                 [shift](std::uint32_t i) { return i + shift; });
  std::copy(part.values().begin(), part.values().end(), out.values().begin() + static_cast<std::ptrdiff_t>(k * b));
}

}  // namespace detail

/// Buffers reused across calls (messages, the decoded part, the running sum).
/// Thread-safety: one workspace per concurrent call.
template <class C>
struct sparse_allgather_workspace {
  codec_workspace<C, float> encode{};
  codec_workspace<C, float> decode{};
  std::vector<std::vector<std::byte>> messages{};  ///< message of rank j after the exchange
  std::vector<std::vector<std::byte>> own{};       ///< this rank's message of each chunk
  sparse_buffer<float> part{};                     ///< the message being added, decoded
  sparse_buffer<float> chunk_sum{};                ///< one chunk's sum (sparse result, chunked)
  detail::sparse_sum sum{};
  std::vector<std::uint8_t> arrived{};  ///< message j is in
  std::size_t sent_bytes = 0;           ///< bytes this rank sent in the last call
};

/// The former name (sluice 0.1); it goes in the next minor version.
template <class C>
using allgather_workspace [[deprecated("renamed sluice::sparse_allgather_workspace")]] = sparse_allgather_workspace<C>;

/// Bytes one rank sends in a sparse allgather when its encoded message (the frame) has
/// `message_bytes`: (N-1) copies, each with its message identity.
constexpr std::size_t sparse_allgather_bytes(std::size_t message_bytes, int world) noexcept {
  return world <= 1 ? 0 : static_cast<std::size_t>(world - 1) * (message_bytes + detail::message_id_bytes);
}

namespace detail {

// Exchanges the messages of one chunk (ws.messages[rank] holds this rank's) and sums their decodes
// into `out` in rank order as they arrive (so every rank gets the same bits). With `clear`, `out`
// is zeroed while this rank's message is on its way; otherwise the caller has zeroed it.
template <Transport T, class C>
std::size_t allgather_sum_dense(T& t, C const& codec, std::span<float> out, collective_context const& ctx,
                                std::uint64_t salt, bool clear, sparse_allgather_workspace<C>& ws, deadline d) {
  char const* const what = "sparse_allgather";
  sluice::wire::expectation const expect{.tensor = ctx.tensor, .step = ctx.step, .extent = out.size()};
  return detail::ring_allgather(
      t, ws.messages, ws.arrived, ctx.tag, static_cast<std::uint32_t>(salt), true, ctx, d, what,
      [&](std::size_t) { return expect; },
      [&] {
        if (clear) std::fill(out.begin(), out.end(), 0.0f);
      },
      [&](std::size_t j) {
        try {
          codec.decode_into(detail::frame_of(ws.messages[j]), detail::encode_ctx(ctx, static_cast<int>(j), salt),
                            ws.decode, out, accumulate);
        } catch (error const& e) {
          detail::rethrow_with(e, what, ctx, t.rank(), static_cast<int>(j));
        }
      });
}

// Runs the chunks of a sparse allgather: encode(c, message) fills this rank's message of chunk c on
// the helper thread, then exchange(c) runs with it in ws.messages[rank].
template <Transport T, class C, class Encode, class Exchange>
void allgather_chunks(T& t, chunking const& ch, sparse_allgather_workspace<C>& ws, Encode&& encode,
                      Exchange&& exchange) {
  auto const r = static_cast<std::size_t>(t.rank());
  ws.messages.resize(static_cast<std::size_t>(t.size()));
  ws.own.resize(ch.count);
  ws.sent_bytes = 0;
  detail::overlap_chunks(
      ch.count, [&](std::size_t c) { encode(c, ws.own[c]); },
      [&](std::size_t c) {
        std::swap(ws.messages[r], ws.own[c]);
        exchange(c);
        std::swap(ws.messages[r], ws.own[c]);
      });
}

}  // namespace detail

/// Allgathers codec messages and writes the sum over ranks of decode(message_j) to `out` (dense).
/// `in` and `out` may be the same span. Any Codec works; sums are taken in rank order, so every
/// rank gets the same bits. `opt.chunk_elements` splits the tensor into chunks whose encode
/// overlaps the exchange of the previous one.
template <Transport T, class C>
requires Codec<C, float>
void sparse_allgather(T& t, C const& codec, std::span<float const> in, std::span<float> out,
                      collective_context const& ctx, sparse_allgather_workspace<C>& ws,
                      sparse_allgather_options const& opt = {}) {
  require(out.size() == in.size(), errc::size_mismatch,
          "sparse_allgather: tensor {}: output of {} elements for input of {}", ctx.tensor, out.size(), in.size());
  deadline const d = deadline::after(ctx.timeout);
  detail::chunking const ch(in.size(), opt.chunk_elements);
  bool const chunked = ch.count > 1;
  detail::allgather_chunks(
      t, ch, ws,
      [&](std::size_t c, std::vector<std::byte>& message) {
        detail::encode_into(codec, in.subspan(ch.begin(c), ch.length(c)), detail::encode_ctx(ctx, t.rank(), ch.salt(c)),
                            ws.encode, message);
        // Chunk c of `in` is read: its part of `out` (which may alias it) is cleared here, off the
        // calling thread, while earlier chunks travel.
        if (chunked) std::fill_n(out.begin() + static_cast<std::ptrdiff_t>(ch.begin(c)), ch.length(c), 0.0f);
      },
      [&](std::size_t c) {
        ws.sent_bytes += detail::allgather_sum_dense(t, codec, out.subspan(ch.begin(c), ch.length(c)), ctx, ch.salt(c),
                                                     !chunked, ws, d);
      });
}

/// As above, for a message this rank has encoded already (in an earlier pipeline stage, with
/// ctx.for_rank(t.rank())): only the exchange and the aggregation run here.
template <Transport T, class C>
requires Codec<C, float>
void sparse_allgather_encoded(T& t, C const& codec, std::span<std::byte const> message, std::span<float> out,
                              collective_context const& ctx, sparse_allgather_workspace<C>& ws) {
  ws.messages.resize(static_cast<std::size_t>(t.size()));
  auto& mine = ws.messages[static_cast<std::size_t>(t.rank())];
  if (message.data() != mine.data()) mine.assign(message.begin(), message.end());  // else encoded in place
  ws.sent_bytes = detail::allgather_sum_dense(t, codec, out, ctx, 0, true, ws, deadline::after(ctx.timeout));
}

namespace detail {

// Decodes message j (from rank j's encode under `ectx`) into ws.part, checks it against the sum's
// extent n and block size (`block`: set by the first part, when `first`), and adds it to ws.sum.
template <class C>
void add_sparse_part(C const& codec, std::span<std::byte const> message, encode_context const& ectx, std::size_t n,
                     sparse_allgather_workspace<C>& ws, std::size_t& block, bool& first) {
  codec.decode_sparse(detail::frame_of(message), ectx, ws.decode, ws.part);
  auto const& p = ws.part;
  require(p.extent() == n, errc::malformed_message, "decoded extent {} where {} was expected", p.extent(), n);
  require(first || p.block_size() == block, errc::malformed_message, "block size {} where {} was expected",
          p.block_size(), block);
  block = p.block_size();
  first = false;
  ws.sum.add(ws.part);
}

// Exchanges the messages of one chunk of n elements (ws.messages[rank] holds this rank's) and sums
// their sparse decodes in rank order as each arrives into ws.sum, finished into `out`. `block` is
// the block size every part must share (0 on the first chunk: taken from rank 0's part).
template <Transport T, class C>
std::size_t allgather_sum_sparse(T& t, C const& codec, std::size_t n, collective_context const& ctx, std::uint64_t salt,
                                 double dense_above, sparse_allgather_workspace<C>& ws, deadline d, std::size_t& block,
                                 sparse_buffer<float>& out) {
  char const* const what = "sparse_allgather";
  int const r = t.rank();
  sluice::wire::expectation const expect{.tensor = ctx.tensor, .step = ctx.step, .extent = n};
  ws.sum.reset(n, dense_above);
  bool first = block == 0;
  std::size_t const sent = detail::ring_allgather(
      t, ws.messages, ws.arrived, ctx.tag, static_cast<std::uint32_t>(salt), true, ctx, d, what,
      [&](std::size_t) { return expect; }, [] {},
      [&](std::size_t j) {  // each message is added while later ones travel
        try {
          add_sparse_part(codec, ws.messages[j], ctx.for_rank(static_cast<int>(j), salt), n, ws, block, first);
        } catch (error const& e) {
          detail::rethrow_with(e, what, ctx, r, static_cast<int>(j));
        }
      });
  ws.sum.finish(out);
  return sent;
}

}  // namespace detail

/// Allgathers the messages of a sparse codec and sums them into a sparse result (sorted unique
/// indices). Each message is decoded and added as soon as it and those of lower ranks are in (a
/// two-way merge, or a dense accumulator above `opt.dense_above`), so every rank adds in rank
/// order and gets the same bits. With `opt.chunk_elements`, each chunk's sum is appended to `out`.
template <Transport T, class C>
requires SparseCodec<C, float>
void sparse_allgather(T& t, C const& codec, std::span<float const> in, sparse_buffer<float>& out,
                      collective_context const& ctx, sparse_allgather_workspace<C>& ws,
                      sparse_allgather_options const& opt = {}) {
  char const* const what = "sparse_allgather";
  int const r = t.rank();
  deadline const d = deadline::after(ctx.timeout);
  detail::chunking const ch(in.size(), opt.chunk_elements);
  std::size_t block = 0;
  detail::allgather_chunks(
      t, ch, ws,
      [&](std::size_t c, std::vector<std::byte>& message) {
        detail::encode_into(codec, in.subspan(ch.begin(c), ch.length(c)), ctx.for_rank(r, ch.salt(c)), ws.encode,
                            message);
      },
      [&](std::size_t c) {
        std::size_t const n = ch.length(c);
        if (ch.count == 1) {
          ws.sent_bytes +=
              detail::allgather_sum_sparse(t, codec, n, ctx, ch.salt(c), opt.dense_above, ws, d, block, out);
          return;
        }
        ws.sent_bytes +=
            detail::allgather_sum_sparse(t, codec, n, ctx, ch.salt(c), opt.dense_above, ws, d, block, ws.chunk_sum);
        if (c == 0) out.reset(in.size(), block);
        detail::append_shifted(out, ws.chunk_sum, ch.begin(c), what, ctx);
      });
}

/// As above, for a message of `extent` elements this rank has encoded already (in an earlier
/// pipeline stage, with ctx.for_rank(t.rank())): only the exchange and the sparse sum run here.
template <Transport T, class C>
requires SparseCodec<C, float>
void sparse_allgather_encoded(T& t, C const& codec, std::span<std::byte const> message, std::size_t extent,
                              sparse_buffer<float>& out, collective_context const& ctx,
                              sparse_allgather_workspace<C>& ws, sparse_allgather_options const& opt = {}) {
  ws.messages.resize(static_cast<std::size_t>(t.size()));
  auto& mine = ws.messages[static_cast<std::size_t>(t.rank())];
  if (message.data() != mine.data()) mine.assign(message.begin(), message.end());  // else encoded in place
  std::size_t block = 0;
  ws.sent_bytes = detail::allgather_sum_sparse(t, codec, extent, ctx, 0, opt.dense_above, ws,
                                               deadline::after(ctx.timeout), block, out);
}

}  // namespace sluice

template <>
struct fmt::formatter<sluice::sparse_allgather_options> : fmt::formatter<std::string_view> {
  auto format(sluice::sparse_allgather_options const& o, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "sparse_allgather_options{{.dense_above = {}, .chunk_elements = {}}}",
                          o.dense_above, o.chunk_elements);
  }
};
