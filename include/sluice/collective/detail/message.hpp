// detail/message: the framed messages of every collective: a wire frame plus an identity (origin,
// sequence, check), a receive that validates both against the call, sends settled on every exit
// path, and errors that name collective, tensor, step, rank and peer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/core.h>

#include <sluice/collective/concepts.hpp>
#include <sluice/compress/concepts.hpp>
#include <sluice/config.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/wire.hpp>
#include <sluice/transport/concepts.hpp>
#include <sluice/transport/detail/progress.hpp>

namespace sluice::detail {

/// The encode_context of `ctx` for rank `rank` (collective_context::for_rank); `salt` separates the
/// random streams of the several encodes one rank makes in one call (chunks, phases).
inline encode_context encode_ctx(collective_context const& ctx, int rank, std::uint64_t salt = 0) noexcept {
  return ctx.for_rank(rank, salt);
}

/// Rethrows a sluice::error with the collective, tensor, step, rank and peer prepended (same errc).
[[noreturn]] SLUICE_DECL void rethrow_with(error const& e, char const* what, collective_context const& ctx, int rank,
                                           int peer);

/// Who a message of a collective is from and where it belongs in its call: every message is a
/// wire frame followed by message_id_bytes of identity, the rank whose data the frame carries
/// (relays keep it), the message's number in its stream (ring step, chunk; 0 where one message per
/// pair and tag suffices) and a check that binds both to the frame's checksum and length.
struct message_id {
  std::uint32_t origin = 0;
  std::uint32_t seq = 0;
  friend constexpr bool operator==(message_id, message_id) = default;
};
inline constexpr std::size_t message_id_bytes = 16;

inline std::uint64_t message_id_check(message_id id, std::span<std::byte const> frame) noexcept {
  std::array<std::byte, 24> b{};
  std::uint64_t const sum =
      frame.size() >= sluice::wire::header_bytes ? detail::wire::load<std::uint64_t>(frame.data() + 72) : 0;
  std::uint64_t const len = frame.size();
  std::memcpy(b.data(), &id.origin, 4);
  std::memcpy(b.data() + 4, &id.seq, 4);
  std::memcpy(b.data() + 8, &sum, 8);
  std::memcpy(b.data() + 16, &len, 8);
  detail::wire::checksum_state s;
  s.update(b);
  return s.finish();
}

/// Appends the identity `id` to the frame held in `msg`.
SLUICE_DECL void stamp(std::vector<std::byte>& msg, message_id id);

/// The frame of a stamped message.
inline std::span<std::byte const> frame_of(std::span<std::byte const> msg) noexcept {
  return msg.first(msg.size() >= message_id_bytes ? msg.size() - message_id_bytes : 0);
}

/// Receives the message `id` from `peer` into `buffer` and returns its frame, validated against
/// `expect` (and ctx's tensor and step). Another message on the same (peer, tag) is discarded: a
/// duplicate, a stale one of an aborted call, or one after a lost message (ordering per peer and
/// tag makes the expected one never come, so the wait ends in errc::timeout). A frame for another
/// tensor or step is discarded too, but remembered: when nothing else comes, the error is
/// errc::malformed_message naming it (the ranks disagree on the call). A corrupted frame or
/// identity is errc::malformed_message at once.
template <Transport T>
std::span<std::byte const> recv_message(T& t, int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d,
                                        message_id id, sluice::wire::expectation const& expect, char const* what,
                                        collective_context const& ctx, sluice::wire::frame* parsed = nullptr) {
  std::size_t discarded = 0;
  bool other_call = false;
  std::uint64_t other_tensor = 0, other_step = 0;
  for (;;) {
    std::span<std::byte const> msg;
    try {
      msg = t.recv(peer, tag, buffer, d);
    } catch (error const& e) {
      if (e.kind() == errc::timeout && other_call)
        rethrow_with(error(errc::malformed_message,
                           fmt::format("frame for tensor {} step {} where tensor {} step {} was expected (the ranks "
                                       "disagree on the call, or it is a stale frame of an earlier one), and no "
                                       "frame of this call came: {}",
                                       other_tensor, other_step, ctx.tensor, ctx.step, e.what())),
                     what, ctx, t.rank(), peer);
      if (e.kind() == errc::timeout && discarded > 0)
        rethrow_with(error(errc::timeout, fmt::format("message {} of rank {} did not come ({} other messages were "
                                                      "discarded: duplicates, or those after a lost one): {}",
                                                      id.seq, id.origin, discarded, e.what())),
                     what, ctx, t.rank(), peer);
      rethrow_with(e, what, ctx, t.rank(), peer);
    }
    try {
      require(msg.size() >= sluice::wire::header_bytes + message_id_bytes, errc::malformed_message,
              "message of {} bytes is shorter than a frame header and its identity", msg.size());
      auto const frame = frame_of(msg);
      message_id got{};
      std::uint64_t check = 0;
      std::memcpy(&got.origin, msg.data() + frame.size(), 4);
      std::memcpy(&got.seq, msg.data() + frame.size() + 4, 4);
      std::memcpy(&check, msg.data() + frame.size() + 8, 8);
      require(check == message_id_check(got, frame), errc::malformed_message,
              "the message's identity does not match its frame (corrupted)");
      if (got != id) {
        ++discarded;
        continue;
      }
      auto const tensor = detail::wire::load<std::uint64_t>(frame.data() + 16);
      auto const step = detail::wire::load<std::uint64_t>(frame.data() + 24);
      if (tensor != ctx.tensor || step != ctx.step) {
        other_call = true, other_tensor = tensor, other_step = step;
        ++discarded;
        continue;
      }
      auto f = sluice::wire::parse(frame, expect);
      if (parsed != nullptr) *parsed = f;
      return frame;
    } catch (error const& e) {
      rethrow_with(e, what, ctx, t.rank(), peer);
    }
  }
}

/// Receives the message `id` from `peer` into `buffer` (recv_message) and returns its parsed frame.
template <Transport T>
sluice::wire::frame recv_frame(T& t, int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d,
                               message_id id, sluice::wire::expectation const& expect, char const* what,
                               collective_context const& ctx) {
  sluice::wire::frame f;
  (void)recv_message(t, peer, tag, buffer, d, id, expect, what, ctx, &f);
  return f;
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

/// One send in flight at a time (the ring steps): start() after the previous one was waited for.
/// On every exit path, a send that has not completed is settled (detail::settle_send: cancelled
/// or waited for) before the destructor returns, so the bytes it reads may be freed afterwards.
template <Transport T>
class pending_send {
 public:
  explicit pending_send(T& t) noexcept : t_(&t) {}
  pending_send(pending_send const&) = delete;
  pending_send& operator=(pending_send const&) = delete;
  ~pending_send() { settle(); }

  void start(int peer, message_tag tag, std::span<std::byte const> bytes, char const* what,
             collective_context const& ctx) {
    settle();
    req_ = start_send(*t_, peer, tag, bytes, what, ctx);
    active_ = true;
    peer_ = peer;
  }
  void wait(deadline d, char const* what, collective_context const& ctx) {
    if (!active_) return;
    wait_send(*t_, req_, peer_, d, what, ctx);
    active_ = false;
  }

 private:
  void settle() noexcept {
    if (active_) settle_send(*t_, req_);
    active_ = false;
  }
  T* t_;
  typename T::request req_{};  // meaningful while active_
  bool active_ = false;
  int peer_ = -1;
};

/// Sends started together and waited for together; on every exit path the destructor settles
/// those that have not completed (as pending_send), so their bytes may be freed afterwards.
template <Transport T>
class send_set {
 public:
  explicit send_set(T& t, std::size_t expected = 0) : t_(&t) { reqs_.reserve(expected); }
  send_set(send_set const&) = delete;
  send_set& operator=(send_set const&) = delete;
  ~send_set() {
    for (auto& e : reqs_) settle_send(*t_, e.req);
  }

  void start(int peer, message_tag tag, std::span<std::byte const> bytes, char const* what,
             collective_context const& ctx) {
    reqs_.push_back({start_send(*t_, peer, tag, bytes, what, ctx), peer});
  }
  void wait_all(deadline d, char const* what, collective_context const& ctx) {
    for (auto& e : reqs_) wait_send(*t_, e.req, e.peer, d, what, ctx);
    reqs_.clear();
  }

 private:
  struct entry {
    typename T::request req;
    int peer;
  };
  T* t_;
  std::vector<entry> reqs_{};
};

/// Writes a one-section frame of fp32 values.
SLUICE_DECL std::size_t write_dense_frame(std::vector<std::byte>& out, std::span<float const> values,
                                          sluice::wire::header const& h);

/// Encodes `in` with `codec` into `out` (resized to the frame).
template <class C, class WS>
std::size_t encode_into(C const& codec, std::span<float const> in, encode_context const& ectx, WS& ws,
                        std::vector<std::byte>& out) {
  out.reserve(codec.max_encoded_bytes(in.size()) + message_id_bytes);  // room for stamp()
  out.resize(codec.max_encoded_bytes(in.size()));
  std::size_t const n = codec.encode(in, ectx, ws, std::span<std::byte>(out));
  out.resize(n);
  return n;
}

}  // namespace sluice::detail

#if SLUICE_HEADER_ONLY
#include <sluice/collective/impl/message.ipp>
#endif
