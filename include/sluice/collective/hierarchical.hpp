// Two-level hierarchical reduction: consecutive ranks form fast local groups; members send their
// encoded gradient to the group leader (local codec), leaders reduce over the slow link (global
// codec: scatter-reduce-allgather for quantizers, allgather otherwise), and each leader sends the
// result, bit for bit, back to its members.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include <fmt/core.h>

#include <sluice/collective/concepts.hpp>
#include <sluice/collective/detail/message.hpp>
#include <sluice/collective/scatter_reduce_allgather.hpp>
#include <sluice/collective/sparse_allgather.hpp>
#include <sluice/transport/group.hpp>

namespace sluice {

/// Options of the hierarchical collective.
struct hierarchical_options {
  int group_size = 1;  ///< ranks per local group (consecutive ranks; the first is the leader); >= 1
  friend bool operator==(hierarchical_options const&, hierarchical_options const&) = default;
};

/// Buffers reused across calls. Thread-safety: one workspace per concurrent call.
template <class Local, class Global>
struct hierarchical_allreduce_workspace {
  codec_workspace<Local, float> local_encode{};
  codec_workspace<Local, float> local_decode{};
  std::vector<std::byte> send{};
  std::vector<std::byte> recv{};
  std::vector<float> acc{};
  scatter_reduce_allgather_workspace<Global> sra{};
  sparse_allgather_workspace<Global> ag{};
};

/// The former name (sluice 0.1); it goes in the next minor version.
template <class Local, class Global>
using hierarchical_workspace [[deprecated("renamed sluice::hierarchical_allreduce_workspace")]] =
    hierarchical_allreduce_workspace<Local, Global>;

/// Sums `in` over all ranks into `out`. Leaders exchange only (world / group_size) messages over
/// the slow link. Every rank gets the same bits.
template <Transport T, class Local, class Global>
requires Codec<Local, float> && Codec<Global, float>
void hierarchical_allreduce(T& t, Local const& local_codec, Global const& global_codec, std::span<float const> in,
                            std::span<float> out, collective_context const& ctx,
                            hierarchical_allreduce_workspace<Local, Global>& ws, hierarchical_options const& opt = {}) {
  char const* const what = "hierarchical_allreduce";
  int const world = t.size(), r = t.rank();
  require(opt.group_size >= 1, errc::invalid_argument, "{}: tensor {}: group_size {} must be >= 1", what, ctx.tensor,
          opt.group_size);
  require(out.size() == in.size(), errc::size_mismatch, "{}: tensor {}: output of {} elements for input of {}", what,
          ctx.tensor, out.size(), in.size());
  int const g = opt.group_size;
  int const leader = r / g * g, group_end = std::min(world, leader + g);
  std::size_t const n = in.size();
  deadline const d = deadline::after(ctx.timeout);
  wire::expectation const dense_expect{.codec = wire::codec_id::dense,
                                       .element = element_type::f32,
                                       .tensor = ctx.tensor,
                                       .step = ctx.step,
                                       .extent = n,
                                       .sections = 1};
  if (r != leader) {
    detail::encode_into(local_codec, in, detail::encode_ctx(ctx, r), ws.local_encode, ws.send);
    detail::stamp(ws.send, {static_cast<std::uint32_t>(r), 0});
    detail::pending_send<T> send(t);
    send.start(leader, ctx.tag, ws.send, what, ctx);
    auto f = detail::recv_frame(t, leader, ctx.tag + 1, ws.recv, d, {static_cast<std::uint32_t>(leader), 0},
                                dense_expect, what, ctx);
    try {
      wire::read_array(f.section(0), out, "hierarchical result");
    } catch (error const& e) {
      detail::rethrow_with(e, what, ctx, r, leader);
    }
    send.wait(d, what, ctx);
    return;
  }
  // Leader: own gradient unencoded, then members in rank order.
  ws.acc.assign(in.begin(), in.end());
  for (int m = leader + 1; m < group_end; ++m) {
    auto const msg = detail::recv_message(t, m, ctx.tag, ws.recv, d, {static_cast<std::uint32_t>(m), 0},
                                          {.tensor = ctx.tensor, .step = ctx.step, .extent = n}, what, ctx);
    try {
      local_codec.decode_into(msg, detail::encode_ctx(ctx, m), ws.local_decode, std::span<float>(ws.acc), accumulate);
    } catch (error const& e) {
      detail::rethrow_with(e, what, ctx, r, m);
    }
  }
  std::vector<int> leaders;
  for (int l = 0; l < world; l += g) leaders.push_back(l);
  group<T> top(t, std::move(leaders));
  collective_context top_ctx = ctx;
  top_ctx.tag = ctx.tag + 4;
  top_ctx.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(d.remaining());
  if constexpr (codec_traits<Global>::is_quantizer)
    scatter_reduce_allgather(top, global_codec, std::span<float const>(ws.acc), out, top_ctx, ws.sra);
  else
    sparse_allgather(top, global_codec, std::span<float const>(ws.acc), out, top_ctx, ws.ag);
  if (group_end - leader > 1) {
    detail::write_dense_frame(ws.send, std::span<float const>(out),
                              {.codec = wire::codec_id::dense,
                               .element = element_type::f32,
                               .flags = 0,
                               .tensor = ctx.tensor,
                               .step = ctx.step,
                               .extent = n});
    detail::stamp(ws.send, {static_cast<std::uint32_t>(r), 0});
    detail::send_set<T> sends(t, static_cast<std::size_t>(group_end - leader));
    for (int m = leader + 1; m < group_end; ++m) sends.start(m, ctx.tag + 1, ws.send, what, ctx);
    sends.wait_all(d, what, ctx);
  }
}

}  // namespace sluice

template <>
struct fmt::formatter<sluice::hierarchical_options> : fmt::formatter<std::string_view> {
  auto format(sluice::hierarchical_options const& o, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "hierarchical_options{{.group_size = {}}}", o.group_size);
  }
};
