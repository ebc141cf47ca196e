// Compressed scatter-reduce-allgather (CGX, Markov et al., Middleware'22, section 4): rank j reduces
// chunk j of everyone's encoded gradient, re-encodes the sum once, and every rank — the owner too —
// decodes the same final bytes. Each element is encoded exactly twice whatever N is, and replicas
// stay bit-identical (CGX's own owner kept its unquantized sum, so replicas drifted). The first
// phase, distinct chunks for distinct owners, runs in shifted steps (detail::pairwise_exchange).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include <sluice/collective/concepts.hpp>
#include <sluice/collective/detail/exchange.hpp>
#include <sluice/collective/detail/message.hpp>

namespace sluice {

/// Buffers reused across calls. Thread-safety: one workspace per concurrent call.
template <class C>
struct scatter_reduce_allgather_workspace {
  codec_workspace<C, float> encode{};
  codec_workspace<C, float> decode{};
  std::vector<std::vector<std::byte>> send{};   ///< my encoding of chunk j (phase 1)
  std::vector<std::vector<std::byte>> recv{};   ///< rank j's encoding of my chunk (phase 1)
  std::vector<std::vector<std::byte>> final{};  ///< the reduced, re-encoded chunk j (phase 2)
  std::vector<float> acc{};
  std::vector<std::uint8_t> arrived{};
  std::size_t sent_bytes = 0;  ///< bytes this rank sent in the last call
};

/// The former name (sluice 0.1); it goes in the next minor version.
template <class C>
using sra_workspace [[deprecated("renamed sluice::scatter_reduce_allgather_workspace")]] =
    scatter_reduce_allgather_workspace<C>;

/// Part j of n elements split over a world of `world` ranks: [first, first + count).
struct part_range {
  std::size_t first = 0;  ///< first element
  std::size_t count = 0;  ///< elements
};
[[nodiscard]] constexpr part_range scatter_reduce_allgather_part(std::size_t n, int world, int j) noexcept {
  auto const w = static_cast<std::size_t>(world), uj = static_cast<std::size_t>(j);
  std::size_t const b = detail::part_begin(n, w, uj);
  return {b, detail::part_begin(n, w, uj + 1) - b};
}

/// Bytes one rank sends when an encoded chunk of n/N elements takes `chunk_bytes`: 2 (N-1) chunks,
/// each with its message identity.
constexpr std::size_t scatter_reduce_allgather_bytes(std::size_t chunk_bytes, int world) noexcept {
  return world <= 1 ? 0 : 2 * static_cast<std::size_t>(world - 1) * (chunk_bytes + detail::message_id_bytes);
}

namespace detail {

// The algorithm, for parts of `out.size()` elements that `encode_part(j, frame)` encodes into
// `frame`: part j (elements [part_begin(n, N, j), part_begin(n, N, j + 1))) with
// ctx.for_rank(rank, 1 + j). The owner of chunk j adds its own part first, then those of ranks
// j-1, j-2, ... as they arrive, encodes the sum once, and every rank decodes the same final bytes.
template <Transport T, class C, class EncodePart>
void scatter_reduce_allgather_parts(T& t, C const& codec, std::span<float> out, collective_context const& ctx,
                                    scatter_reduce_allgather_workspace<C>& ws, EncodePart&& encode_part) {
  char const* const what = "scatter_reduce_allgather";
  int const world = t.size(), r = t.rank();
  auto const w = static_cast<std::size_t>(world), ur = static_cast<std::size_t>(r);
  std::size_t const n = out.size();
  deadline const d = deadline::after(ctx.timeout);
  ws.send.resize(w);
  ws.recv.resize(w);
  ws.final.resize(w);
  ws.sent_bytes = 0;
  auto range = [&](std::size_t j) {
    std::size_t const b = detail::part_begin(n, w, j);
    return std::pair{b, detail::part_begin(n, w, j + 1) - b};
  };
  std::size_t const my_len = range(ur).second;
  // Phases 1 and 2: chunk j, encoded for its owner j (salted per chunk, so random codecs draw
  // independent streams), goes to j in shifted steps (detail::pairwise_exchange: one flow per link);
  // I add the decodings of my chunk in a fixed order, my own first, then rank r-1, r-2, ..., each
  // as it arrives, and encode the sum once. The next chunk is encoded while the current one travels.
  sluice::wire::expectation const expect1{.tensor = ctx.tensor, .step = ctx.step, .extent = my_len};
  auto encode_for = [&](std::size_t j) {
    auto& msg = j == ur ? ws.recv[ur] : ws.send[j];
    encode_part(j, msg);
    detail::stamp(msg, {static_cast<std::uint32_t>(r), 0});
  };
  auto add = [&](std::size_t j) {
    try {
      codec.decode_into(detail::frame_of(ws.recv[j]), ctx.for_rank(static_cast<int>(j), 1 + ur), ws.decode,
                        std::span<float>(ws.acc), accumulate);
    } catch (error const& e) {
      detail::rethrow_with(e, what, ctx, r, static_cast<int>(j));
    }
  };
  auto own = [&] {
    encode_for(ur);
    add(ur);
  };
  ws.acc.assign(my_len, 0.0f);
  if (world > 1) encode_for((ur + 1) % w);
  ws.sent_bytes += detail::pairwise_exchange(
      t, ctx.tag, ctx, d, what, [&](std::size_t j) { return std::span<std::byte const>(ws.send[j]); },
      [&](std::size_t j) -> std::vector<std::byte>& { return ws.recv[j]; }, [&](std::size_t) { return expect1; },
      [&](int k) {
        if (k == 1) own();
        if (k + 1 < world) encode_for((ur + static_cast<std::size_t>(k) + 1) % w);
      },
      add);
  if (world == 1) own();
  detail::encode_into(codec, std::span<float const>(ws.acc), ctx.for_rank(r, 1 + w + ur), ws.encode, ws.final[ur]);
  // Phase 3: allgather the final chunks around the ring; everyone decodes the same bytes, my own
  // chunk first, each other chunk as soon as it is in (chunks are disjoint, so order is free).
  ws.sent_bytes += detail::ring_allgather(
      t, ws.final, ws.arrived, ctx.tag + 1, 0, false, ctx, d, what,
      [&](std::size_t j) {
        return sluice::wire::expectation{.tensor = ctx.tensor, .step = ctx.step, .extent = range(j).second};
      },
      [] {},
      [&](std::size_t j) {
        auto const [b, len] = range(j);
        try {
          codec.decode_into(detail::frame_of(ws.final[j]), ctx.for_rank(static_cast<int>(j), 1 + w + j), ws.decode,
                            out.subspan(b, len), overwrite);
        } catch (error const& e) {
          detail::rethrow_with(e, what, ctx, r, static_cast<int>(j));
        }
      });
}

}  // namespace detail

/// Sums `in` over ranks into `out` through two encodings per element (the owner of chunk j adds its
/// own part first, then those of ranks j-1, j-2, ...). Any Codec works; built for
/// quantizers (codec_traits<C>::is_quantizer), whose chunks keep their compression ratio. `in` and
/// `out` may alias. Every rank's `out` holds the same bits.
template <Transport T, class C>
requires Codec<C, float>
void scatter_reduce_allgather(T& t, C const& codec, std::span<float const> in, std::span<float> out,
                              collective_context const& ctx, scatter_reduce_allgather_workspace<C>& ws) {
  require(out.size() == in.size(), errc::size_mismatch,
          "scatter_reduce_allgather: tensor {}: output of {} elements for input of {}", ctx.tensor, out.size(),
          in.size());
  auto const w = static_cast<std::size_t>(t.size());
  int const r = t.rank();
  detail::scatter_reduce_allgather_parts(t, codec, out, ctx, ws, [&](std::size_t j, std::vector<std::byte>& frame) {
    std::size_t const b = detail::part_begin(in.size(), w, j);
    detail::encode_into(codec, in.subspan(b, detail::part_begin(in.size(), w, j + 1) - b), ctx.for_rank(r, 1 + j),
                        ws.encode, frame);
  });
}

/// The split phase, for parts this rank has encoded already (in an earlier pipeline stage, error
/// feedback included): `parts[j]` is elements [scatter_reduce_allgather_part(n, N, j)) of the
/// tensor encoded with ctx.for_rank(t.rank(), 1 + j), for each rank j; `out` has the n elements.
template <Transport T, class C>
requires Codec<C, float>
void scatter_reduce_allgather_encoded(T& t, C const& codec, std::span<std::span<std::byte const> const> parts,
                                      std::span<float> out, collective_context const& ctx,
                                      scatter_reduce_allgather_workspace<C>& ws) {
  require(parts.size() == static_cast<std::size_t>(t.size()), errc::size_mismatch,
          "scatter_reduce_allgather_encoded: tensor {}: {} encoded parts for a world of {}", ctx.tensor, parts.size(),
          t.size());
  detail::scatter_reduce_allgather_parts(t, codec, out, ctx, ws, [&](std::size_t j, std::vector<std::byte>& frame) {
    frame.assign(parts[j].begin(), parts[j].end());
  });
}

}  // namespace sluice
