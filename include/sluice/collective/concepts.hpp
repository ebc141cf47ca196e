// What every collective shares: the per-call context (step, tensor, deadline, tag base), the
// framed receive-and-validate step, and error messages that name collective, tensor, step and peer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/format.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/wire.hpp>
#include <sluice/transport/concepts.hpp>

namespace sluice {

/// Identifies one collective call. All ranks pass equal values for the same call; frames carry
/// step and tensor, so a message from another call is rejected (errc::malformed_message).
struct collective_context {
  std::uint64_t step = 0;                     ///< training step
  std::uint64_t tensor = 0;                   ///< tensor or bucket id
  std::uint64_t seed = 0;                     ///< job-wide seed for random codecs
  std::chrono::milliseconds timeout{60'000};  ///< the whole collective must finish within this
  message_tag tag{0};                         ///< base tag; a collective uses tags [tag, tag + tags_per_collective)
  friend bool operator==(collective_context const&, collective_context const&) = default;
};

/// Tags one collective call may use above its base tag.
inline constexpr std::uint32_t tags_per_collective = 16;

namespace detail {

/// Splits [0, n) into `parts` contiguous ranges of near-equal size; range i is [begin(i), begin(i+1)).
constexpr std::size_t part_begin(std::size_t n, std::size_t parts, std::size_t i) noexcept {
  return n / parts * i + std::min(i, n % parts);
}

/// The encode_context of `ctx` for rank `rank`; `salt` separates the random streams of the several
/// encodes one rank makes in one call (chunks, phases), while frames keep ctx.tensor and ctx.step.
inline encode_context encode_ctx(collective_context const& ctx, int rank, std::uint64_t salt = 0) noexcept {
  std::uint64_t s = ctx.seed ^ (salt * 0x9E3779B97F4A7C15ull);
  s ^= s >> 31;
  return {.seed = salt == 0 ? ctx.seed : s,
          .rank = static_cast<std::uint32_t>(rank),
          .step = ctx.step,
          .tensor = ctx.tensor,
          .shape = {}};
}

/// Rethrows a sluice::error with the collective, tensor, step, rank and peer prepended (same errc).
[[noreturn]] inline void rethrow_with(error const& e, char const* what, collective_context const& ctx, int rank,
                                      int peer) {
  throw error(e.kind(), fmt::format("{}: tensor {} step {}: rank {} with rank {}: {}", what, ctx.tensor, ctx.step, rank,
                                    peer, e.what()));
}

/// Receives one frame from `peer` into `buffer` and validates it against `expect`.
template <Transport T>
wire::frame recv_frame(T& t, int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d,
                       wire::expectation const& expect, char const* what, collective_context const& ctx) {
  try {
    auto msg = t.recv(peer, tag, buffer, d);
    return wire::parse(msg, expect);
  } catch (error const& e) {
    rethrow_with(e, what, ctx, t.rank(), peer);
  }
}

/// Receives one message from `peer` and validates only that it is a frame for this call (codec
/// frames are validated in full again by the codec's decoder).
template <Transport T>
std::span<std::byte const> recv_checked(T& t, int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d,
                                        wire::expectation const& expect, char const* what,
                                        collective_context const& ctx) {
  try {
    auto msg = t.recv(peer, tag, buffer, d);
    (void)wire::parse(msg, expect);
    return msg;
  } catch (error const& e) {
    rethrow_with(e, what, ctx, t.rank(), peer);
  }
}

/// Waits for a send request, naming the peer on failure.
template <Transport T>
void wait_send(T& t, typename T::request& r, int peer, deadline d, char const* what, collective_context const& ctx) {
  try {
    r.wait(d);
  } catch (error const& e) {
    rethrow_with(e, what, ctx, t.rank(), peer);
  }
}

/// Starts a send, naming the peer on failure.
template <Transport T>
typename T::request start_send(T& t, int peer, message_tag tag, std::span<std::byte const> bytes, char const* what,
                               collective_context const& ctx) {
  try {
    return t.send(peer, tag, bytes);
  } catch (error const& e) {
    rethrow_with(e, what, ctx, t.rank(), peer);
  }
}

/// Writes a one-section frame of fp32 values.
inline std::size_t write_dense_frame(std::vector<std::byte>& out, std::span<float const> values,
                                     wire::header const& h) {
  out.resize(wire::frame_bytes({values.size() * sizeof(float)}));
  wire::writer w(out, h);
  wire::write_array(w, values);
  std::size_t const n = w.finish();
  out.resize(n);
  return n;
}

/// Encodes `in` with `codec` into `out` (resized to the frame).
template <class C, class WS>
std::size_t encode_into(C const& codec, std::span<float const> in, encode_context const& ectx, WS& ws,
                        std::vector<std::byte>& out) {
  out.resize(codec.max_encoded_bytes(in.size()));
  std::size_t const n = codec.encode(in, ectx, ws, std::span<std::byte>(out));
  out.resize(n);
  return n;
}

}  // namespace detail
}  // namespace sluice

template <>
struct fmt::formatter<sluice::collective_context> : fmt::formatter<std::string_view> {
  auto format(sluice::collective_context const& c, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "collective_context{{step={}, tensor={}, seed={}, timeout={}ms, tag={}}}", c.step,
                          c.tensor, c.seed, c.timeout.count(), sluice::to_underlying(c.tag));
  }
};
