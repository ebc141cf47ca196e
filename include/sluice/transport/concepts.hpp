// The Transport concept: ranked, tagged, non-blocking byte messages where every wait has a
// deadline. Engines (local threads, Open MPI, ZeroMQ) model it; collectives are written against it.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include <sluice/core/detail/spec_formatter.hpp>
#include <sluice/core/error.hpp>

namespace sluice {

/// Opt-in tag: a transport declares `using transport_concept = transport_tag;`.
struct transport_tag {};

/// The clock every deadline is measured on.
using transport_clock = std::chrono::steady_clock;

/// A point in time after which a wait gives up with errc::timeout (or errc::peer_lost when the
/// engine knows the peer is gone). A value; copy it freely.
struct deadline {
  transport_clock::time_point at = transport_clock::time_point::max();  ///< when waits give up

  /// A deadline `d` from now.
  template <class Rep, class Period>
  [[nodiscard]] static deadline after(std::chrono::duration<Rep, Period> d) noexcept {
    return {transport_clock::now() + std::chrono::duration_cast<transport_clock::duration>(d)};
  }
  /// No deadline (use only where something else bounds the wait).
  [[nodiscard]] static constexpr deadline never() noexcept { return {}; }
  [[nodiscard]] bool expired() const noexcept { return transport_clock::now() >= at; }
  /// Time left, zero when expired.
  [[nodiscard]] transport_clock::duration remaining() const noexcept {
    auto const now = transport_clock::now();
    return at > now ? at - now : transport_clock::duration::zero();
  }
  friend constexpr bool operator==(deadline const&, deadline const&) = default;
};

/// A message tag: user tags below tag_limit; messages between one (sender, receiver, tag) triple
/// arrive in the order they were sent. 31 bits so that every engine (MPI_TAG_UB >= 2^31-1 in
/// Open MPI) can carry it.
enum class message_tag : std::uint32_t {};
inline constexpr std::uint32_t tag_limit = 1u << 30;

/// Tags reserved by transports for their own control traffic (barrier), above tag_limit.
inline constexpr message_tag barrier_tag{tag_limit + 1};

/// Tag arithmetic: `tag + k` names the k-th phase of a collective based at `tag`.
constexpr message_tag operator+(message_tag t, std::uint32_t k) noexcept {
  return message_tag{static_cast<std::uint32_t>(t) + k};
}
constexpr std::uint32_t to_underlying(message_tag t) noexcept { return static_cast<std::uint32_t>(t); }

/// A send request: poll with test() or wait with wait(deadline) (throws errc::timeout / peer_lost).
template <class R>
concept TransportRequest = std::movable<R> && requires(R& r, deadline d) {
  { r.test() } -> std::same_as<bool>;
  r.wait(d);
};

/// A transport endpoint (one rank's view of a world of size() ranks).
///  - rank(), size(): this endpoint's rank in [0, size()).
///  - send(peer, tag, bytes) -> request: starts sending one message; `bytes` must stay valid and
///    unchanged until the request completes (test() true or wait() returned): until then the
///    engine may read them (zmq sends large messages from them without a copy). Messages from one
///    sender to one receiver with one tag arrive in order. peer == rank() is allowed.
///  - optional: cancel(request&): on return the engine no longer reads the request's bytes
///    (the message may or may not have been delivered). detail::settle_send uses it for requests
///    an aborted operation leaves behind.
///  - recv(peer, tag, buffer, deadline) -> span: receives the next message from (peer, tag) into
///    `buffer` (resized to the message; its capacity is kept, so a reused buffer does not
///    allocate) and returns the message bytes. Throws errc::timeout naming the peer when the
///    deadline passes, errc::peer_lost when the engine knows the peer is gone.
///  - barrier(deadline): returns when every rank has entered it; same errors as recv.
///  - optional: enter_barrier() -> std::uint64_t: counts a barrier this endpoint enters and returns
///    its number (0, 1, ...); transports whose barrier is detail::dissemination_barrier have it, so
///    that a wrapper (faulty) can run the same barrier over its own sends.
template <class T>
concept Transport = std::derived_from<typename T::transport_concept, transport_tag> &&
    TransportRequest<typename T::request> && requires(T& t, int peer, message_tag tag, std::span<std::byte const> bytes,
                                                      std::vector<std::byte>& buffer, deadline d) {
  { std::as_const(t).rank() } -> std::same_as<int>;
  { std::as_const(t).size() } -> std::same_as<int>;
  { t.send(peer, tag, bytes) } -> std::same_as<typename T::request>;
  { t.recv(peer, tag, buffer, d) } -> std::same_as<std::span<std::byte const>>;
  t.barrier(d);
};

/// A transport whose engine has its own dense fp32 sum-allreduce (MPI_Allreduce, NCCL).
template <class T>
concept NativeAllreduce = Transport<T> && requires(T& t, std::span<float> data, deadline d) {
  t.native_allreduce_sum(data, d);
};

/// A transport over an MPI communicator that offers the blocking MPI_Allreduce itself
/// (mpi_allreduce_sum: dense fp32, in place, MPI_SUM, no deadline); the pipeline's
/// by_mpi_allreduce, the DDP-equivalent baseline, needs it.
template <class T>
concept MpiAllreduce = Transport<T> && requires(T& t, std::span<float> data) {
  t.mpi_allreduce_sum(data);
};

}  // namespace sluice

template <>
struct fmt::formatter<sluice::deadline> : sluice::detail::spec_formatter {
  auto format(sluice::deadline const& d, format_context& ctx) const {
    return format_with_spec(std::chrono::duration<double>(d.remaining()).count(), ctx);
  }
};
