// The pipeline's exchange strategies, one type per way of aggregating a bucket, each owning its
// buffers: encode (feedback + codec, on the encode thread) writes a frame where the exchange
// (on the exchange thread) sends it from, and the exchange leaves the bucket's sum in a
// bucket_sum for the apply thread. exchange_for<C, Collective> chooses the type once.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <sluice/collective/ring_allreduce.hpp>
#include <sluice/collective/scatter_reduce_allgather.hpp>
#include <sluice/collective/sparse_allgather.hpp>
#include <sluice/compress/concepts.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/feedback/concepts.hpp>
#include <sluice/feedback/non_finite.hpp>
#include <sluice/feedback/state.hpp>
#include <sluice/feedback/workspace.hpp>
#include <sluice/pipeline/options.hpp>
#include <sluice/transport/concepts.hpp>
#include <sluice/transport/group.hpp>

namespace sluice {

/// A bucket's aggregated gradient between its exchange and its apply: dense, or sparse (sparse
/// codecs with pipeline_options::sparse_apply).
struct bucket_sum {
  bool sparse = false;
  std::vector<float> dense{};
  sparse_buffer<float> sparse_values{};

  void size(std::size_t elements, bool sparse_result, std::size_t block) {
    sparse = sparse_result;
    if (sparse)
      sparse_values.reset(elements, block);
    else
      dense.assign(elements, 0.0f);
  }
};

/// The sparse form of a dense sum, the same on every rank that holds the same dense bits: every
/// block of out.block_size() elements holding a non-zero value (a partial last block padded).
inline void sparse_from_dense(std::span<float const> dense, sparse_buffer<float>& out) {
  std::size_t const b = out.block_size(), n = dense.size(), blocks = n / b + (n % b != 0 ? 1 : 0);
  auto const nonzero = [&](std::size_t j) {
    for (std::size_t i = j * b; i < std::min(n, (j + 1) * b); ++i)
      if (dense[i] != 0.0f) return true;
    return false;
  };
  std::size_t nnz = 0;
  for (std::size_t j = 0; j < blocks; ++j) nnz += nonzero(j) ? 1 : 0;
  out.reset(n, b);
  out.resize_for_overwrite(nnz);
  auto idx = out.indices();
  auto val = out.values();
  for (std::size_t j = 0, k = 0; j < blocks; ++j) {
    if (!nonzero(j)) continue;
    idx[k] = static_cast<std::uint32_t>(j);
    for (std::size_t i = 0; i < b; ++i) val[k * b + i] = j * b + i < n ? dense[j * b + i] : 0.0f;
    ++k;
  }
}

/// What an exchange strategy is told about its bucket.
struct bucket_info {
  std::size_t id = 0;          ///< bucket id
  std::size_t elements = 0;    ///< fp32 elements
  int world = 1;               ///< ranks
  int rank = 0;                ///< this rank
  int group_size = 1;          ///< ranks per group (by_hierarchical: consecutive ranks, the first leads)
  bool gather_frames = false;  ///< by_hierarchical with a sparse codec: hierarchical_sparse::gather_frames
};

/// What encoding a bucket needs besides the codec: the feedback policy, the feedback state and
/// bucket, and the encode workspace (all owned by the pipeline).
template <class F, class C>
struct bucket_encoder {
  F const& feedback;
  feedback_state& state;
  std::size_t bucket;
  feedback_workspace<C, float>& ws;
  bool finite = false;  ///< the pipeline's read of this gradient found no NaN/Inf: no scan repeats it

  /// The codec's context for `rank` (part `salt` of a scatter-reduce-allgather).
  [[nodiscard]] encode_context context(collective_context const& ctx, int rank, std::uint64_t salt = 0) const noexcept {
    encode_context e = ctx.for_rank(rank, salt);
    e.finite = finite;
    e.fail_stop = true;  // an errc::non_finite stops the pipeline
    return e;
  }
};

/// errc::non_finite at the first NaN/Inf of a gradient that travels unencoded, unless the feedback
/// policy propagates them or the pipeline's read checked it.
template <class F, class C>
void require_finite_unless_propagated(bucket_encoder<F, C> const& enc, std::span<float const> grad) {
  if (enc.finite || enc.feedback.non_finite == non_finite_policy::propagate) return;
  std::size_t const bad = first_non_finite(grad);
  require(bad == std::size_t(-1), errc::non_finite, "gradient element {} is {}", bad,
          bad == std::size_t(-1) ? 0.0f : grad[bad]);
}

/// The fp32 sum of the whole bucket: by_ring_allreduce (any transport) or by_mpi_allreduce
/// (MPI_Allreduce); also every bucket that bypasses compression. Feedback and codec are unused:
/// the gradient travels exactly, so only the non-finite check of the feedback's policy applies.
template <bool Mpi>
struct dense_exchange {
  std::vector<float> staged{};  ///< the gradient, from encode until the exchange takes it
  ring_allreduce_workspace ws{};

  void size(bucket_info const& b) { staged.assign(b.elements, 0.0f); }

  /// Copies `grad` in; errc::non_finite at its first NaN/Inf unless the policy propagates them.
  template <class F, class C>
  std::size_t encode(bucket_encoder<F, C> const& enc, C const&, std::span<float const> grad, collective_context const&,
                     int) {
    if (enc.finite || enc.feedback.non_finite == non_finite_policy::propagate) {
      std::copy(grad.begin(), grad.end(), staged.begin());
    } else {  // copied and checked in one pass; the scan for the first NaN/Inf only when there is one
      std::uint32_t bad = 0;
      for (std::size_t k = 0; k < grad.size(); ++k) {
        bad |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(grad[k]) & 0x7f800000u) == 0x7f800000u);
        staged[k] = grad[k];
      }
      if (bad != 0) require_finite_unless_propagated(enc, grad);
    }
    return grad.size() * sizeof(float);
  }

  /// Sums every rank's staged gradient into sum.dense; returns the bytes this rank sent.
  template <Transport Tr, class C, class F>
  std::size_t exchange(Tr& t, C const&, collective_context const& ctx, bucket_sum& sum, bucket_encoder<F, C> const&) {
    std::copy(staged.begin(), staged.end(), sum.dense.begin());
    std::size_t const n = staged.size();
    if constexpr (Mpi) {
      // MPI does not say what it sent: report the bandwidth-optimal volume 2 (N - 1) / N * 4n.
      if (t.size() > 1) t.mpi_allreduce_sum(std::span<float>(sum.dense));
      auto const w = static_cast<std::size_t>(t.size());
      return 2 * (w - 1) * n * sizeof(float) / w;
    } else {
      ring_allreduce(t, std::span<float>(sum.dense), ctx, ws);
      return ring_allreduce_bytes(n, t.size());
    }
  }
};

/// by_sparse_allgather: this rank's frame, encoded in place in the workspace's message slot, to
/// every rank; every rank's frame summed in rank order (densely, or sparsely for sparse_apply).
template <class C>
struct sparse_allgather_exchange {
  sparse_allgather_workspace<C> ws{};
  std::size_t elements = 0;

  void size(bucket_info const& b) {
    elements = b.elements;
    ws.messages.resize(static_cast<std::size_t>(b.world));
  }

  template <class F>
  std::size_t encode(bucket_encoder<F, C> const& enc, C const& codec, std::span<float const> grad,
                     collective_context const& ctx, int rank) {
    auto& frame = ws.messages[static_cast<std::size_t>(rank)];
    frame.resize(codec.max_encoded_bytes(grad.size()));
    std::size_t const bytes =
        enc.feedback.encode(codec, enc.state.slice(enc.bucket), grad, enc.context(ctx, rank), enc.ws, frame);
    frame.resize(bytes);
    return bytes;
  }

  template <Transport Tr, class F>
  std::size_t exchange(Tr& t, C const& codec, collective_context const& ctx, bucket_sum& sum,
                       bucket_encoder<F, C> const&) {
    std::span<std::byte const> const mine(ws.messages[static_cast<std::size_t>(t.rank())]);
    if (sum.sparse)
      sparse_allgather_encoded(t, codec, mine, elements, sum.sparse_values, ctx, ws);
    else
      sparse_allgather_encoded(t, codec, mine, std::span<float>(sum.dense), ctx, ws);
    return ws.sent_bytes;
  }
};

/// by_scatter_reduce_allgather (CGX): one frame per owner rank, each part encoded with its own
/// feedback slice; owners reduce and re-encode their chunk, every rank decodes the same bytes.
template <class C>
struct scatter_reduce_allgather_exchange {
  std::vector<std::vector<std::byte>> parts{};  ///< this rank's frame of part j, for owner j
  std::vector<std::span<std::byte const>> views{};
  scatter_reduce_allgather_workspace<C> ws{};

  void size(bucket_info const& b) {
    parts.resize(static_cast<std::size_t>(b.world));
    views.resize(parts.size());
  }

  template <class F>
  std::size_t encode(bucket_encoder<F, C> const& enc, C const& codec, std::span<float const> grad,
                     collective_context const& ctx, int rank) {
    int const w = static_cast<int>(parts.size());
    std::size_t bytes = 0;
    for (int j = 0; j < w; ++j) {
      auto const part = scatter_reduce_allgather_part(grad.size(), w, j);
      auto& frame = parts[static_cast<std::size_t>(j)];
      frame.resize(codec.max_encoded_bytes(part.count));
      std::size_t const n = enc.feedback.encode(
          codec, enc.state.slice(enc.bucket, part.first, part.count), grad.subspan(part.first, part.count),
          enc.context(ctx, rank, 1 + static_cast<std::uint64_t>(j)), enc.ws, frame);
      if (n == 0 && part.count > 0) return 0;  // the feedback skipped the step
      frame.resize(n);
      bytes += n;
    }
    return bytes;
  }

  template <Transport Tr, class F>
  std::size_t exchange(Tr& t, C const& codec, collective_context const& ctx, bucket_sum& sum,
                       bucket_encoder<F, C> const&) {
    std::copy(parts.begin(), parts.end(), views.begin());
    scatter_reduce_allgather_encoded(t, codec, std::span<std::span<std::byte const> const>(views),
                                     std::span<float>(sum.dense), ctx, ws);
    return ws.sent_bytes;
  }
};

/// Where a rank sits among by_hierarchical's groups: consecutive ranks of group_size, the first of
/// each leads; `top` is its group's place among the leaders.
struct rank_groups {
  int rank = 0, world = 1, size = 1, leader = 0, end = 1, top = 0;
  std::vector<int> leaders;  // the leaders' ranks, in order

  void assign(bucket_info const& b) {
    require(b.group_size >= 1, errc::invalid_argument, "pipeline: group size {} must be >= 1", b.group_size);
    rank = b.rank;
    world = b.world;
    size = b.group_size;
    leader = b.rank / b.group_size * b.group_size;
    end = std::min(b.world, leader + b.group_size);
    leaders.clear();
    for (int l = 0; l < b.world; l += b.group_size) leaders.push_back(l);
    top = leader / b.group_size;
  }
  [[nodiscard]] bool leads() const noexcept { return rank == leader; }
  /// One past the last rank of the group that `first` leads.
  [[nodiscard]] int end_of(int first) const noexcept { return std::min(world, first + size); }
};

/// by_hierarchical: every member sends its fp32 gradient to its group's leader over the fast
/// path; the leader sums its group in rank order, compensates and encodes the sum with its own
/// error feedback, runs `Inner` (the codec's exchange, or the dense ring for bypassed buckets)
/// with the other leaders over the thin link, and sends the result to its members, bit for bit.
template <class C, class Inner>
struct hierarchical_exchange {
  Inner top{};  // among the leaders
  rank_groups g{};
  std::vector<std::byte> send{}, recv{};
  std::vector<float> acc{};  // the leader's group sum
  codec_workspace<identity, float> dense{};
  bucket_sum total{};  // the dense sum, when the bucket's sum is sparse (every rank derives it alike)

  void size(bucket_info const& b) {
    g.assign(b);
    top.size({.id = b.id, .elements = b.elements, .world = static_cast<int>(g.leaders.size()), .rank = g.top});
    acc.assign(g.leads() ? b.elements : 0, 0.0f);
    total.size(b.elements, false, 1);
  }

  /// Members frame their gradient for the leader; leaders keep theirs as the first term of the sum.
  template <class F>
  std::size_t encode(bucket_encoder<F, C> const& enc, C const&, std::span<float const> grad,
                     collective_context const& ctx, int) {
    require_finite_unless_propagated(enc, grad);
    if (g.leads()) {
      std::copy(grad.begin(), grad.end(), acc.begin());
    } else {
      detail::encode_into(identity{}, grad, ctx.for_rank(g.rank), dense, send);
      detail::stamp(send, {static_cast<std::uint32_t>(g.rank), 0});
    }
    return grad.size() * sizeof(float);
  }

  template <Transport Tr, class F>
  std::size_t exchange(Tr& t, C const& codec, collective_context const& ctx, bucket_sum& sum,
                       bucket_encoder<F, C> const& enc) {
    bucket_sum& dense_sum = sum.sparse ? total : sum;
    std::size_t const sent = exchange_dense(t, codec, ctx, dense_sum, enc);
    if (sum.sparse) sparse_from_dense(total.dense, sum.sparse_values);
    return sent;
  }

 private:
  template <Transport Tr, class F>
  std::size_t exchange_dense(Tr& t, C const& codec, collective_context const& ctx, bucket_sum& sum,
                             bucket_encoder<F, C> const& enc) {
    char const* const what = "pipeline (hierarchical)";
    deadline const d = deadline::after(ctx.timeout);
    std::size_t const n = sum.dense.size();
    wire::expectation const dense_expect{.codec = wire::codec_id::dense,
                                         .element = element_type::f32,
                                         .tensor = ctx.tensor,
                                         .step = ctx.step,
                                         .extent = n,
                                         .sections = 1};
    if (!g.leads()) {
      detail::pending_send<Tr> out(t);
      out.start(g.leader, ctx.tag, send, what, ctx);
      auto f = detail::recv_frame(t, g.leader, ctx.tag + 1, recv, d, {static_cast<std::uint32_t>(g.leader), 0},
                                  dense_expect, what, ctx);
      try {
        wire::read_array(f.section(0), std::span<float>(sum.dense), "hierarchical result");
      } catch (error const& e) {
        detail::rethrow_with(e, what, ctx, g.rank, g.leader);
      }
      out.wait(d, what, ctx);
      return send.size();
    }
    for (int m = g.leader + 1; m < g.end; ++m) {
      auto const msg = detail::recv_message(t, m, ctx.tag, recv, d, {static_cast<std::uint32_t>(m), 0},
                                            {.tensor = ctx.tensor, .step = ctx.step, .extent = n}, what, ctx);
      try {
        identity{}.decode_into(msg, ctx.for_rank(m), dense, std::span<float>(acc), accumulate);
      } catch (error const& e) {
        detail::rethrow_with(e, what, ctx, g.rank, m);
      }
    }
    group<Tr> leaders_group(t, g.leaders);
    collective_context top_ctx = ctx;
    top_ctx.tag = ctx.tag + 4;
    top_ctx.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(d.remaining());
    std::size_t sent = 0;
    auto sum_enc = enc;
    sum_enc.finite = false;  // a sum of finite gradients may overflow: the feedback checks it
    if (top.encode(sum_enc, codec, std::span<float const>(acc), top_ctx, g.top) == 0 && n > 0)
      throw_error(errc::non_finite, "the feedback skipped the group's sum");
    sent += top.exchange(leaders_group, codec, top_ctx, sum, enc);
    if (g.end - g.leader > 1) {
      detail::write_dense_frame(send, std::span<float const>(sum.dense),
                                {.codec = wire::codec_id::dense,
                                 .element = element_type::f32,
                                 .flags = 0,
                                 .tensor = ctx.tensor,
                                 .step = ctx.step,
                                 .extent = n});
      detail::stamp(send, {static_cast<std::uint32_t>(g.rank), 0});
      detail::send_set<Tr> sends(t, static_cast<std::size_t>(g.end - g.leader));
      for (int m = g.leader + 1; m < g.end; ++m) sends.start(m, ctx.tag + 1, send, what, ctx);
      sends.wait_all(d, what, ctx);
      sent += send.size() * static_cast<std::size_t>(g.end - g.leader - 1);
    }
    return sent;
  }
};

/// by_hierarchical with hierarchical_sparse::gather_frames: every rank encodes its own frame (its
/// own error feedback), as by_sparse_allgather does; members send theirs to the leader, the
/// leaders relay their groups' frames around a ring of leaders, and each leader sends its members
/// every frame they lack. Every rank then sums the N frames in rank order, as the flat allgather
/// does: the same bits as flat, with (N - g) / (N - 1) of its frames crossing between groups.
template <class C>
struct hierarchical_gather_exchange {
  sparse_allgather_exchange<C> own{};  // the encode, and the frames of every rank (ws.messages[j])
  rank_groups g{};

  void size(bucket_info const& b) {
    g.assign(b);
    own.size(b);
  }

  template <class F>
  std::size_t encode(bucket_encoder<F, C> const& enc, C const& codec, std::span<float const> grad,
                     collective_context const& ctx, int r) {
    return own.encode(enc, codec, grad, ctx, r);
  }

  template <Transport Tr, class F>
  std::size_t exchange(Tr& t, C const& codec, collective_context const& ctx, bucket_sum& sum,
                       bucket_encoder<F, C> const&) {
    char const* const what = "pipeline (hierarchical, gathered frames)";
    deadline const d = deadline::after(ctx.timeout);
    auto& ws = own.ws;
    auto& msgs = ws.messages;
    wire::expectation const expect{.tensor = ctx.tensor, .step = ctx.step, .extent = own.elements};
    auto const recv = [&](int from, message_tag tag, int origin) {
      (void)detail::recv_message(t, from, tag, msgs[static_cast<std::size_t>(origin)], d,
                                 {static_cast<std::uint32_t>(origin), 0}, expect, what, ctx);
    };
    detail::stamp(msgs[static_cast<std::size_t>(g.rank)], {static_cast<std::uint32_t>(g.rank), 0});
    std::size_t sent = 0;
    detail::send_set<Tr> sends(t, static_cast<std::size_t>(g.world));
    auto const send = [&](int to, message_tag tag, int origin) {
      auto const& m = msgs[static_cast<std::size_t>(origin)];
      sends.start(to, tag, m, what, ctx);
      sent += m.size();
    };
    if (!g.leads()) {  // my frame to the leader, every other frame from it
      send(g.leader, ctx.tag, g.rank);
      for (int j = 0; j < g.world; ++j)
        if (j != g.rank) recv(g.leader, ctx.tag + 1, j);
    } else {
      for (int m = g.leader + 1; m < g.end; ++m) recv(m, ctx.tag, m);
      // Around the ring of leaders: pass my group's frames left, then each group that arrives from
      // the right on, unless the left leader is where it started.
      auto const l = static_cast<int>(g.leaders.size());
      int const left = g.leaders[static_cast<std::size_t>((g.top + l - 1) % l)];
      int const right = g.leaders[static_cast<std::size_t>((g.top + 1) % l)];
      if (l > 1)
        for (int j = g.leader; j < g.end; ++j) send(left, ctx.tag + 2, j);
      for (int k = 1; k < l; ++k) {
        int const first = g.leaders[static_cast<std::size_t>((g.top + k) % l)];
        for (int j = first; j < g.end_of(first); ++j) {
          recv(right, ctx.tag + 2, j);
          if (k + 1 < l) send(left, ctx.tag + 2, j);
        }
      }
      for (int m = g.leader + 1; m < g.end; ++m)
        for (int j = 0; j < g.world; ++j)
          if (j != m) send(m, ctx.tag + 1, j);
    }
    // Every frame in hand: their sum in rank order, as the flat allgather takes it.
    int j = 0;
    try {
      if (sum.sparse) {
        ws.sum.reset(own.elements, sparse_allgather_options{}.dense_above);
        std::size_t block = 0;
        bool first = true;
        for (j = 0; j < g.world; ++j)
          detail::add_sparse_part(codec, msgs[static_cast<std::size_t>(j)], ctx.for_rank(j, 0), own.elements, ws, block,
                                  first);
        ws.sum.finish(sum.sparse_values);
      } else {
        std::fill(sum.dense.begin(), sum.dense.end(), 0.0f);
        for (j = 0; j < g.world; ++j)
          codec.decode_into(detail::frame_of(msgs[static_cast<std::size_t>(j)]), detail::encode_ctx(ctx, j, 0),
                            ws.decode, std::span<float>(sum.dense), accumulate);
      }
    } catch (error const& e) {
      detail::rethrow_with(e, what, ctx, g.rank, j);
    }
    sends.wait_all(d, what, ctx);
    return sent;
  }
};

/// by_hierarchical for a sparse codec: the leader's sum (hierarchical_sparse::sum_on_leader) or
/// the gathered frames (gather_frames), as bucket_info says.
template <class C>
struct hierarchical_sparse_exchange {
  hierarchical_exchange<C, sparse_allgather_exchange<C>> summed{};
  hierarchical_gather_exchange<C> gathered{};
  bool gather = false;

  void size(bucket_info const& b) {
    gather = b.gather_frames;
    if (gather)
      gathered.size(b);
    else
      summed.size(b);
  }
  template <class F>
  std::size_t encode(bucket_encoder<F, C> const& enc, C const& codec, std::span<float const> grad,
                     collective_context const& ctx, int r) {
    return gather ? gathered.encode(enc, codec, grad, ctx, r) : summed.encode(enc, codec, grad, ctx, r);
  }
  template <Transport Tr, class F>
  std::size_t exchange(Tr& t, C const& codec, collective_context const& ctx, bucket_sum& sum,
                       bucket_encoder<F, C> const& enc) {
    return gather ? gathered.exchange(t, codec, ctx, sum, enc) : summed.exchange(t, codec, ctx, sum, enc);
  }
};

namespace detail::pipeline {

/// The collective tag by_codec resolves to for codec C.
template <class C, class Choice>
struct resolve_collective {
  using type = Choice;
};
template <class C>
struct resolve_collective<C, by_codec> {
  using type = std::conditional_t<
      std::is_same_v<C, identity>, by_ring_allreduce,
      std::conditional_t<codec_traits<C>::is_sparse, by_sparse_allgather, by_scatter_reduce_allgather>>;
};

template <class C, class Collective>
struct exchange_choice;
template <class C>
struct exchange_choice<C, by_ring_allreduce> {
  using type = dense_exchange<false>;
};
template <class C>
struct exchange_choice<C, by_mpi_allreduce> {
  using type = dense_exchange<true>;
};
template <class C>
struct exchange_choice<C, by_sparse_allgather> {
  using type = sparse_allgather_exchange<C>;
};
template <class C>
struct exchange_choice<C, by_scatter_reduce_allgather> {
  using type = scatter_reduce_allgather_exchange<C>;
};
template <class C>
struct exchange_choice<C, by_hierarchical> {
  using inner = typename exchange_choice<C, typename resolve_collective<C, by_codec>::type>::type;
  using type = std::conditional_t<std::is_same_v<inner, sparse_allgather_exchange<C>>, hierarchical_sparse_exchange<C>,
                                  hierarchical_exchange<C, inner>>;
};

/// The exchange of buckets that bypass compression.
template <class C, class Collective>
struct bypass_choice {
  using type = dense_exchange<std::is_same_v<Collective, by_mpi_allreduce>>;
};
template <class C>
struct bypass_choice<C, by_hierarchical> {
  using type = hierarchical_exchange<C, dense_exchange<false>>;
};

}  // namespace detail::pipeline

/// The exchange strategy of a compressed bucket for codec C and aggregation choice Collective
/// (by_codec resolved through the codec's traits).
template <class C, class Collective>
using exchange_for = typename detail::pipeline::exchange_choice<
    C, typename detail::pipeline::resolve_collective<C, Collective>::type>::type;
/// The exchange strategy of a bucket that bypasses compression (the dense fp32 sum).
template <class C, class Collective>
using bypass_exchange_for = typename detail::pipeline::bypass_choice<C, Collective>::type;

}  // namespace sluice
