// Dense ring allreduce (reduce-scatter then allgather; Patarasuk & Yuan 2009) of fp32 gradients over
// any Transport. Each chunk is reduced on one rank and then copied, so replicas are bit-identical.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <fmt/core.h>

#include <sluice/collective/concepts.hpp>
#include <sluice/collective/detail/exchange.hpp>
#include <sluice/collective/detail/message.hpp>

namespace sluice {

/// Options of the dense ring allreduce.
struct ring_allreduce_options {
  bool use_native = false;  ///< use the engine's own allreduce (MPI_Allreduce) when the transport has one
  friend bool operator==(ring_allreduce_options const&, ring_allreduce_options const&) = default;
};

/// Buffers reused across calls; after the first call of a size, calls allocate nothing.
/// Thread-safety: one workspace per concurrent call.
struct ring_allreduce_workspace {
  std::vector<std::byte> send{};
  std::vector<std::byte> recv{};
  std::vector<float> scratch{};
};

/// The former name (sluice 0.1); it goes in the next minor version.
using ring_workspace [[deprecated("renamed sluice::ring_allreduce_workspace")]] = ring_allreduce_workspace;

/// Bytes one rank sends in a ring allreduce of `n` fp32 elements over `world` ranks:
/// 2 (N-1) chunk frames, i.e. about 2 (N-1)/N * 4n (the bandwidth-optimal volume) plus headers
/// and message identities.
constexpr std::size_t ring_allreduce_bytes(std::size_t n, int world) noexcept {
  if (world <= 1) return 0;
  auto const w = static_cast<std::size_t>(world);
  std::size_t total = 0;
  // Every rank sends each chunk except one in each phase; chunk sizes differ by at most one element,
  // so count the average via the per-chunk sizes of rank 0.
  for (std::size_t s = 0; s + 1 < w; ++s) {
    std::size_t const c1 = (w - s) % w, c2 = (1 + w - s) % w;
    total += wire::frame_bytes({(detail::part_begin(n, w, c1 + 1) - detail::part_begin(n, w, c1)) * sizeof(float)});
    total += wire::frame_bytes({(detail::part_begin(n, w, c2 + 1) - detail::part_begin(n, w, c2)) * sizeof(float)});
    total += 2 * detail::message_id_bytes;
  }
  return total;
}

/// Sums `data` over all ranks in place: on return every rank holds the same bits.
/// Throws errc::timeout / errc::peer_lost (naming the peer) when a neighbour fails to deliver before
/// ctx.timeout, errc::malformed_message for a corrupted frame or one from another step or tensor,
/// and for a tensor whose size differs across ranks (the message names the tensor).
template <Transport T>
void ring_allreduce(T& t, std::span<float> data, collective_context const& ctx, ring_allreduce_workspace& ws,
                    ring_allreduce_options const& opt = {}) {
  int const world = t.size(), r = t.rank();
  if (world == 1) return;
  deadline const d = deadline::after(ctx.timeout);
  if constexpr (NativeAllreduce<T>) {
    if (opt.use_native) {
      try {
        t.native_allreduce_sum(data, d);
      } catch (error const& e) {
        detail::rethrow_with(e, "ring_allreduce(native)", ctx, r, -1);
      }
      return;
    }
  }
  auto const w = static_cast<std::size_t>(world);
  std::size_t const n = data.size();
  int const right = (r + 1) % world, left = (r - 1 + world) % world;
  auto chunk = [&](int c) {
    auto const uc = static_cast<std::size_t>((c % world + world) % world);
    std::size_t const b = detail::part_begin(n, w, uc), e = detail::part_begin(n, w, uc + 1);
    return data.subspan(b, e - b);
  };
  wire::header const head{.codec = wire::codec_id::dense,
                          .element = element_type::f32,
                          .flags = 0,
                          .tensor = ctx.tensor,
                          .step = ctx.step,
                          .extent = n};
  wire::expectation const expect{.codec = wire::codec_id::dense,
                                 .element = element_type::f32,
                                 .tensor = ctx.tensor,
                                 .step = ctx.step,
                                 .extent = n,
                                 .sections = 1};
  char const* const what = "ring_allreduce";
  detail::pending_send<T> send(t);  // ws.send is in flight until waited for, on every exit path
  // Reduce-scatter: after step s, chunk (r - s - 1) holds the sum over s + 2 ranks.
  for (int s = 0; s + 1 < world; ++s) {
    detail::write_dense_frame(ws.send, chunk(r - s), head);
    detail::stamp(ws.send, {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(s)});
    send.start(right, ctx.tag, ws.send, what, ctx);
    auto f = detail::recv_frame(t, left, ctx.tag, ws.recv, d,
                                {static_cast<std::uint32_t>(left), static_cast<std::uint32_t>(s)}, expect, what, ctx);
    auto dst = chunk(r - s - 1);
    ws.scratch.resize(dst.size());
    try {
      wire::read_array(f.section(0), std::span<float>(ws.scratch), "ring_allreduce chunk");
    } catch (error const& e) {
      detail::rethrow_with(e, what, ctx, r, left);
    }
    for (std::size_t i = 0; i < dst.size(); ++i) dst[i] += ws.scratch[i];
    send.wait(d, what, ctx);
  }
  // Allgather: rank r owns the reduced chunk r + 1 and passes reduced chunks around the ring.
  for (int s = 0; s + 1 < world; ++s) {
    detail::write_dense_frame(ws.send, chunk(r + 1 - s), head);
    detail::stamp(ws.send, {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(s)});
    send.start(right, ctx.tag + 1, ws.send, what, ctx);
    auto f = detail::recv_frame(t, left, ctx.tag + 1, ws.recv, d,
                                {static_cast<std::uint32_t>(left), static_cast<std::uint32_t>(s)}, expect, what, ctx);
    auto dst = chunk(r - s);
    try {
      wire::read_array(f.section(0), dst, "ring_allreduce chunk");
    } catch (error const& e) {
      detail::rethrow_with(e, what, ctx, r, left);
    }
    send.wait(d, what, ctx);
  }
}

}  // namespace sluice

template <>
struct fmt::formatter<sluice::ring_allreduce_options> : fmt::formatter<std::string_view> {
  auto format(sluice::ring_allreduce_options const& o, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "ring_allreduce_options{{.use_native = {}}}", o.use_native);
  }
};
