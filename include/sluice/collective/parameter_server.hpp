// Parameter-server aggregation: server rank s (ranks 0..S-1) owns shard s of the tensor, sums every
// rank's encoded shard in rank order, and sends one encoding of the sum back to all ranks, which
// all decode the same bytes. Push and pull codecs are separate policies.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include <fmt/core.h>

#include <sluice/collective/concepts.hpp>
#include <sluice/collective/detail/exchange.hpp>
#include <sluice/collective/detail/message.hpp>

namespace sluice {

/// Options of the parameter-server collective.
struct parameter_server_options {
  int servers = 1;  ///< ranks 0..servers-1 serve one shard each; in [1, world size]
  friend bool operator==(parameter_server_options const&, parameter_server_options const&) = default;
};

/// Buffers reused across calls. Thread-safety: one workspace per concurrent call.
template <class Push, class Pull>
struct parameter_server_workspace {
  codec_workspace<Push, float> push_encode{};
  codec_workspace<Push, float> push_decode{};
  codec_workspace<Pull, float> pull_encode{};
  codec_workspace<Pull, float> pull_decode{};
  std::vector<std::vector<std::byte>> push{};  ///< my encoding of shard s
  std::vector<std::vector<std::byte>> recv{};  ///< (server) rank j's encoding of my shard
  std::vector<std::vector<std::byte>> pull{};  ///< server s's encoding of the summed shard s
  std::vector<float> acc{};
  std::size_t sent_bytes = 0;  ///< bytes this rank sent in the last call
};

/// The former name (sluice 0.1); it goes in the next minor version.
template <class Push, class Pull>
using ps_workspace [[deprecated("renamed sluice::parameter_server_workspace")]] =
    parameter_server_workspace<Push, Pull>;

/// Sums `in` over ranks into `out` through the servers. Workers send each shard once (push codec);
/// each server sends its summed shard to every rank (pull codec). Every rank gets the same bits.
template <Transport T, class Push, class Pull>
requires Codec<Push, float> && Codec<Pull, float>
void parameter_server(T& t, Push const& push_codec, Pull const& pull_codec, std::span<float const> in,
                      std::span<float> out, collective_context const& ctx, parameter_server_workspace<Push, Pull>& ws,
                      parameter_server_options const& opt = {}) {
  char const* const what = "parameter_server";
  int const world = t.size(), r = t.rank();
  require(opt.servers >= 1 && opt.servers <= world, errc::invalid_argument,
          "{}: tensor {}: {} servers for a world of {}", what, ctx.tensor, opt.servers, world);
  require(out.size() == in.size(), errc::size_mismatch, "{}: tensor {}: output of {} elements for input of {}", what,
          ctx.tensor, out.size(), in.size());
  auto const w = static_cast<std::size_t>(world), ur = static_cast<std::size_t>(r);
  auto const ns = static_cast<std::size_t>(opt.servers);
  std::size_t const n = in.size();
  deadline const d = deadline::after(ctx.timeout);
  ws.push.resize(ns);
  ws.pull.resize(ns);
  ws.recv.resize(w);
  ws.sent_bytes = 0;
  auto shard = [&](std::size_t s) {
    std::size_t const b = detail::part_begin(n, ns, s);
    return std::pair{b, detail::part_begin(n, ns, s + 1) - b};
  };
  detail::send_set<T> sends(t, w + ns);
  for (std::size_t s = 0; s < ns; ++s) {
    auto const [b, len] = shard(s);
    detail::encode_into(push_codec, in.subspan(b, len), detail::encode_ctx(ctx, r, 1 + s), ws.push_encode, ws.push[s]);
    detail::stamp(ws.push[s], {static_cast<std::uint32_t>(r), 0});
    if (s != ur) {
      sends.start(static_cast<int>(s), ctx.tag, ws.push[s], what, ctx);
      ws.sent_bytes += ws.push[s].size();
    }
  }
  if (ur < ns) {
    auto const [b, len] = shard(ur);
    ws.acc.assign(len, 0.0f);
    for (std::size_t j = 0; j < w; ++j) {
      std::span<std::byte const> const msg =
          j == ur
              ? detail::frame_of(ws.push[ur])
              : detail::recv_message(t, static_cast<int>(j), ctx.tag, ws.recv[j], d, {static_cast<std::uint32_t>(j), 0},
                                     {.tensor = ctx.tensor, .step = ctx.step, .extent = len}, what, ctx);
      try {
        push_codec.decode_into(msg, detail::encode_ctx(ctx, static_cast<int>(j), 1 + ur), ws.push_decode,
                               std::span<float>(ws.acc), accumulate);
      } catch (error const& e) {
        detail::rethrow_with(e, what, ctx, r, static_cast<int>(j));
      }
    }
    detail::encode_into(pull_codec, std::span<float const>(ws.acc), detail::encode_ctx(ctx, r, 1 + ns + ur),
                        ws.pull_encode, ws.pull[ur]);
    detail::stamp(ws.pull[ur], {static_cast<std::uint32_t>(r), 0});
    for (std::size_t j = 0; j < w; ++j)
      if (j != ur) {
        sends.start(static_cast<int>(j), ctx.tag + 1, ws.pull[ur], what, ctx);
        ws.sent_bytes += ws.pull[ur].size();
      }
  }
  for (std::size_t s = 0; s < ns; ++s) {
    auto const [b, len] = shard(s);
    if (s != ur)
      (void)detail::recv_message(t, static_cast<int>(s), ctx.tag + 1, ws.pull[s], d, {static_cast<std::uint32_t>(s), 0},
                                 {.tensor = ctx.tensor, .step = ctx.step, .extent = len}, what, ctx);
    try {
      pull_codec.decode_into(detail::frame_of(ws.pull[s]), detail::encode_ctx(ctx, static_cast<int>(s), 1 + ns + s),
                             ws.pull_decode, out.subspan(b, len), overwrite);
    } catch (error const& e) {
      detail::rethrow_with(e, what, ctx, r, static_cast<int>(s));
    }
  }
  sends.wait_all(d, what, ctx);
}

}  // namespace sluice

template <>
struct fmt::formatter<sluice::parameter_server_options> : fmt::formatter<std::string_view> {
  auto format(sluice::parameter_server_options const& o, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "parameter_server_options{{.servers = {}}}", o.servers);
  }
};
