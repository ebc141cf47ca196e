// Sparse allgather: every rank's encoded message reaches every rank unchanged, then every rank
// aggregates all N messages in rank order (StellaTrain's inter-cluster exchange), so replicas agree
// bit for bit. Sparse results come from a sorted k-way merge-sum, or a dense accumulator when dense enough.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <queue>
#include <span>
#include <vector>

#include <fmt/format.h>

#include <sluice/collective/concepts.hpp>
#include <sluice/core/sparse.hpp>

namespace sluice {

/// Options of the sparse allgather.
struct sparse_allgather_options {
  /// Above this density (total received nnz / extent) the merge uses a dense accumulator.
  double dense_above = 0.25;
  friend bool operator==(sparse_allgather_options const&, sparse_allgather_options const&) = default;
};

/// Buffers reused across calls (messages, decoded parts, merge heap, dense accumulator).
/// Thread-safety: one workspace per concurrent call.
template <class C>
struct allgather_workspace {
  codec_workspace<C, float> encode{};
  codec_workspace<C, float> decode{};
  std::vector<std::vector<std::byte>> messages{};  ///< message of rank j after the exchange
  std::vector<sparse_buffer<float>> parts{};
  std::vector<float> dense{};
  std::vector<std::uint8_t> marks{};
  std::vector<std::pair<std::uint64_t, std::uint32_t>> heap{};
  std::vector<std::size_t> cursor{};
  std::size_t received_bytes = 0;  ///< bytes this rank received in the last call
  std::size_t sent_bytes = 0;      ///< bytes this rank sent in the last call
};

namespace detail {

/// Allgather of variable-size messages, in two halves so that a caller can work while the bytes
/// are on the wire: start_exchange sends this rank's message (ws.messages[rank]) to every peer at
/// once, right neighbour first (no store-and-forward, so a slow hop delays only its own message);
/// recv_message then receives rank p's message into ws.messages[p]. Each rank sends and receives
/// (N-1) messages, the volume of a ring allgather.
template <Transport T, class C>
std::vector<typename T::request> start_exchange(T& t, allgather_workspace<C>& ws, collective_context const& ctx,
                                                char const* what) {
  int const world = t.size(), r = t.rank();
  auto const& mine = ws.messages[static_cast<std::size_t>(r)];
  ws.sent_bytes = ws.received_bytes = 0;
  std::vector<typename T::request> reqs;
  reqs.reserve(static_cast<std::size_t>(world));
  for (int k = 1; k < world; ++k) {
    reqs.push_back(start_send(t, (r + k) % world, ctx.tag, mine, what, ctx));
    ws.sent_bytes += mine.size();
  }
  return reqs;
}

template <Transport T, class C>
void recv_message(T& t, allgather_workspace<C>& ws, int peer, collective_context const& ctx, deadline d,
                  std::size_t extent, char const* what) {
  wire::expectation const expect{.tensor = ctx.tensor, .step = ctx.step, .extent = extent};
  auto& buf = ws.messages[static_cast<std::size_t>(peer)];
  (void)recv_checked(t, peer, ctx.tag, buf, d, expect, what, ctx);
  ws.received_bytes += buf.size();
}

/// Waits for the sends of start_exchange (request i went to rank + i + 1).
template <Transport T>
void finish_exchange(T& t, std::vector<typename T::request>& reqs, collective_context const& ctx, deadline d,
                     char const* what) {
  for (std::size_t i = 0; i < reqs.size(); ++i)
    wait_send(t, reqs[i], (t.rank() + static_cast<int>(i) + 1) % t.size(), d, what, ctx);
}

}  // namespace detail

/// Bytes one rank sends in a sparse allgather when its message has `message_bytes`: (N-1) copies.
constexpr std::size_t sparse_allgather_bytes(std::size_t message_bytes, int world) noexcept {
  return world <= 1 ? 0 : static_cast<std::size_t>(world - 1) * message_bytes;
}

namespace detail {

// Sends first; the output is cleared while the messages travel, and each message is added as soon
// as it and those of lower ranks are in (sums in rank order, so every rank gets the same bits).
template <Transport T, class C>
void allgather_sum_dense(T& t, C const& codec, std::span<float> out, collective_context const& ctx,
                         allgather_workspace<C>& ws, deadline d) {
  char const* const what = "sparse_allgather";
  int const world = t.size(), r = t.rank();
  auto reqs = detail::start_exchange(t, ws, ctx, what);
  std::fill(out.begin(), out.end(), 0.0f);
  for (int j = 0; j < world; ++j) {
    if (j != r) detail::recv_message(t, ws, j, ctx, d, out.size(), what);
    try {
      codec.decode_add(std::span<std::byte const>(ws.messages[static_cast<std::size_t>(j)]), detail::encode_ctx(ctx, j),
                       ws.decode, out);
    } catch (error const& e) {
      detail::rethrow_with(e, what, ctx, r, j);
    }
  }
  detail::finish_exchange(t, reqs, ctx, d, what);
}

}  // namespace detail

/// Allgathers codec messages and writes the sum over ranks of decode(message_j) to `out` (dense).
/// `in` and `out` may be the same span. Any Codec works; sums are taken in rank order, so every
/// rank gets the same bits.
template <Transport T, class C>
requires Codec<C, float>
void sparse_allgather(T& t, C const& codec, std::span<float const> in, std::span<float> out,
                      collective_context const& ctx, allgather_workspace<C>& ws) {
  require(out.size() == in.size(), errc::size_mismatch,
          "sparse_allgather: tensor {}: output of {} elements for input of {}", ctx.tensor, out.size(), in.size());
  deadline const d = deadline::after(ctx.timeout);
  ws.messages.resize(static_cast<std::size_t>(t.size()));
  detail::encode_into(codec, in, detail::encode_ctx(ctx, t.rank()), ws.encode,
                      ws.messages[static_cast<std::size_t>(t.rank())]);
  detail::allgather_sum_dense(t, codec, out, ctx, ws, d);
}

/// As above, for a message this rank has encoded already (in an earlier pipeline stage, with
/// detail::encode_ctx(ctx, rank)): only the exchange and the aggregation run here.
template <Transport T, class C>
requires Codec<C, float>
void sparse_allgather_encoded(T& t, C const& codec, std::span<std::byte const> message, std::span<float> out,
                              collective_context const& ctx, allgather_workspace<C>& ws) {
  ws.messages.resize(static_cast<std::size_t>(t.size()));
  auto& mine = ws.messages[static_cast<std::size_t>(t.rank())];
  mine.assign(message.begin(), message.end());
  detail::allgather_sum_dense(t, codec, out, ctx, ws, deadline::after(ctx.timeout));
}

namespace detail {

/// Sum of sparse parts (same extent and block size) in rank order into `out`: a k-way merge over a
/// min-heap keyed by (index, part), or a dense accumulator when the total density exceeds `dense_above`.
template <class C>
void merge_sum(std::span<sparse_buffer<float> const> parts, std::size_t extent, std::size_t block,
               sparse_buffer<float>& out, allgather_workspace<C>& ws, double dense_above) {
  std::size_t total = 0;
  for (auto const& p : parts) total += p.nnz();
  std::size_t const blocks = block == 0 ? 0 : (extent + block - 1) / block;
  out.reset(extent, block);
  if (blocks > 0 && static_cast<double>(total) > dense_above * static_cast<double>(blocks)) {
    ws.dense.assign(extent, 0.0f);
    ws.marks.assign(blocks, 0);
    for (auto const& p : parts) {
      scatter(p.view(), std::span<float>(ws.dense), true);
      for (auto idx : p.indices()) ws.marks[idx] = 1;
    }
    std::size_t nnz = 0;
    for (auto m : ws.marks) nnz += m;
    out.resize(nnz);
    std::size_t k = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      if (!ws.marks[b]) continue;
      out.indices()[k] = static_cast<std::uint32_t>(b);
      for (std::size_t e = 0; e < block; ++e)
        out.values()[k * block + e] = b * block + e < extent ? ws.dense[b * block + e] : 0.0f;
      ++k;
    }
    return;
  }
  // k-way merge; equal indices pop in part (rank) order, so the sum order matches the dense path.
  out.reserve(total);
  auto& heap = ws.heap;
  heap.clear();
  auto& pos = ws.cursor;
  pos.assign(parts.size(), 0);
  auto greater = [](auto const& a, auto const& b) { return a > b; };
  for (std::size_t j = 0; j < parts.size(); ++j)
    if (parts[j].nnz() > 0) heap.emplace_back(parts[j].indices()[0], static_cast<std::uint32_t>(j));
  std::make_heap(heap.begin(), heap.end(), greater);
  std::size_t k = 0;
  out.resize(total);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    auto const [idx, j] = heap.back();
    heap.pop_back();
    auto const& p = parts[j];
    std::size_t const at = pos[j]++;
    bool const fresh = k == 0 || out.indices()[k - 1] != idx;
    if (fresh) {
      out.indices()[k] = static_cast<std::uint32_t>(idx);
      for (std::size_t e = 0; e < block; ++e) out.values()[k * block + e] = 0.0f + p.values()[at * block + e];
      ++k;
    } else {
      for (std::size_t e = 0; e < block; ++e) out.values()[(k - 1) * block + e] += p.values()[at * block + e];
    }
    if (pos[j] < p.nnz()) {
      heap.emplace_back(p.indices()[pos[j]], j);
      std::push_heap(heap.begin(), heap.end(), greater);
    }
  }
  out.resize(k);
}

}  // namespace detail

/// Allgathers the messages of a sparse codec and merge-sums them into a sparse result (sorted
/// unique indices). Below `opt.dense_above` density a k-way merge, above it a dense accumulator;
/// both add in rank order, so every rank gets the same bits.
template <Transport T, class C>
requires SparseCodec<C, float>
void sparse_allgather(T& t, C const& codec, std::span<float const> in, sparse_buffer<float>& out,
                      collective_context const& ctx, allgather_workspace<C>& ws,
                      sparse_allgather_options const& opt = {}) {
  char const* const what = "sparse_allgather";
  int const world = t.size(), r = t.rank();
  deadline const d = deadline::after(ctx.timeout);
  auto const w = static_cast<std::size_t>(world);
  ws.messages.resize(w);
  ws.parts.resize(w);
  detail::encode_into(codec, in, detail::encode_ctx(ctx, r), ws.encode, ws.messages[static_cast<std::size_t>(r)]);
  auto reqs = detail::start_exchange(t, ws, ctx, what);
  std::size_t block = 0;
  for (std::size_t j = 0; j < w; ++j) {  // each message is decoded while later ones travel
    if (j != static_cast<std::size_t>(r)) detail::recv_message(t, ws, static_cast<int>(j), ctx, d, in.size(), what);
    try {
      codec.decode_sparse(std::span<std::byte const>(ws.messages[j]), detail::encode_ctx(ctx, static_cast<int>(j)),
                          ws.decode, ws.parts[j]);
      auto const& p = ws.parts[j];
      require(p.extent() == in.size(), errc::malformed_message, "decoded extent {} where {} was expected", p.extent(),
              in.size());
      require(j == 0 || p.block_size() == block, errc::malformed_message, "block size {} where {} was expected",
              p.block_size(), block);
      block = p.block_size();
    } catch (error const& e) {
      detail::rethrow_with(e, what, ctx, r, static_cast<int>(j));
    }
  }
  detail::finish_exchange(t, reqs, ctx, d, what);
  detail::merge_sum(std::span<sparse_buffer<float> const>(ws.parts), in.size(), block, out, ws, opt.dense_above);
}

}  // namespace sluice

template <>
struct fmt::formatter<sluice::sparse_allgather_options> : fmt::formatter<std::string_view> {
  auto format(sluice::sparse_allgather_options const& o, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "sparse_allgather_options{{dense_above={}}}", o.dense_above);
  }
};
