// What every collective shares: the per-call context (step, tensor, deadline, tag base), the
// framed receive-and-validate step, and error messages that name collective, tensor, step and peer.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
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

  /// The encode_context rank `rank` encodes with in this call: the wire protocol of every
  /// collective. A frame handed to a split-phase collective (`*_encoded`) must be encoded with
  /// for_rank(t.rank()) (part j of a scatter_reduce_allgather with for_rank(t.rank(), 1 + j)):
  /// random codecs regenerate the sender's indices from this context, so another rule decodes
  /// silently wrong. `salt` separates the streams of several encodes of one rank in one call.
  [[nodiscard]] encode_context for_rank(int rank, std::uint64_t salt = 0) const noexcept;

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

}  // namespace detail

inline encode_context collective_context::for_rank(int rank, std::uint64_t salt) const noexcept {
  return detail::encode_ctx(*this, rank, salt);
}

namespace detail {

/// Rethrows a sluice::error with the collective, tensor, step, rank and peer prepended (same errc).
[[noreturn]] inline void rethrow_with(error const& e, char const* what, collective_context const& ctx, int rank,
                                      int peer) {
  throw error(e.kind(), fmt::format("{}: tensor {} step {}: rank {} with rank {}: {}", what, ctx.tensor, ctx.step, rank,
                                    peer, e.what()));
}

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
      frame.size() >= wire::header_bytes ? wire::detail::load<std::uint64_t>(frame.data() + 72) : 0;
  std::uint64_t const len = frame.size();
  std::memcpy(b.data(), &id.origin, 4);
  std::memcpy(b.data() + 4, &id.seq, 4);
  std::memcpy(b.data() + 8, &sum, 8);
  std::memcpy(b.data() + 16, &len, 8);
  wire::detail::checksum_state s;
  s.update(b);
  return s.finish();
}

/// Appends the identity `id` to the frame held in `msg`.
inline void stamp(std::vector<std::byte>& msg, message_id id) {
  std::size_t const n = msg.size();
  std::uint64_t const check = message_id_check(id, msg);
  msg.resize(n + message_id_bytes);
  std::memcpy(msg.data() + n, &id.origin, 4);
  std::memcpy(msg.data() + n + 4, &id.seq, 4);
  std::memcpy(msg.data() + n + 8, &check, 8);
}

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
                                        message_id id, wire::expectation const& expect, char const* what,
                                        collective_context const& ctx, wire::frame* parsed = nullptr) {
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
      require(msg.size() >= wire::header_bytes + message_id_bytes, errc::malformed_message,
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
      auto const tensor = wire::detail::load<std::uint64_t>(frame.data() + 16);
      auto const step = wire::detail::load<std::uint64_t>(frame.data() + 24);
      if (tensor != ctx.tensor || step != ctx.step) {
        other_call = true, other_tensor = tensor, other_step = step;
        ++discarded;
        continue;
      }
      auto f = wire::parse(frame, expect);
      if (parsed != nullptr) *parsed = f;
      return frame;
    } catch (error const& e) {
      rethrow_with(e, what, ctx, t.rank(), peer);
    }
  }
}

/// Receives the message `id` from `peer` into `buffer` (recv_message) and returns its parsed frame.
template <Transport T>
wire::frame recv_frame(T& t, int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d, message_id id,
                       wire::expectation const& expect, char const* what, collective_context const& ctx) {
  wire::frame f;
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
inline std::size_t write_dense_frame(std::vector<std::byte>& out, std::span<float const> values,
                                     wire::header const& h) {
  out.reserve(wire::frame_bytes({values.size() * sizeof(float)}) + message_id_bytes);
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
  out.reserve(codec.max_encoded_bytes(in.size()) + message_id_bytes);  // room for stamp()
  out.resize(codec.max_encoded_bytes(in.size()));
  std::size_t const n = codec.encode(in, ectx, ws, std::span<std::byte>(out));
  out.resize(n);
  return n;
}

/// The chunks a collective with `chunk_elements` per chunk splits n elements into: chunk c is
/// [c * chunk_elements, min(n, (c + 1) * chunk_elements)); chunk_elements == 0 (or >= n) is one
/// chunk of all n elements.
struct chunking {
  std::size_t n = 0, size = 0, count = 1;
  chunking(std::size_t elements, std::size_t chunk_elements) noexcept
      : n(elements),
        size(chunk_elements == 0 || chunk_elements >= elements ? elements : chunk_elements),
        count(size == 0 ? 1 : (elements + size - 1) / size) {}
  [[nodiscard]] std::size_t begin(std::size_t c) const noexcept { return c * size; }
  [[nodiscard]] std::size_t length(std::size_t c) const noexcept { return std::min(n, (c + 1) * size) - c * size; }
  /// Salt of chunk c's random streams (encode_ctx): 0 when unchunked, so one chunk is the plain call.
  [[nodiscard]] std::uint64_t salt(std::size_t c) const noexcept { return count == 1 ? 0 : c + 1; }
};

/// Overlaps the local work of chunk c + 1 with the exchange of chunk c: `prepare(c)` runs for
/// c = 0, 1, ... on a helper thread (encoding, framing: work that touches no transport), and
/// `exchange(c)` on the calling thread, in order, each as soon as prepare(c) has returned. The
/// transport is used only by the calling thread, so engines that accept calls from one thread
/// only (MPI_THREAD_FUNNELED) work too. With one chunk both run here without a thread. An
/// exception from prepare(c) stops the exchanges before chunk c and is rethrown here; one from an
/// exchange stops the preparation after its current chunk and is rethrown once the helper joined.
template <class Prepare, class Exchange>
void overlap_chunks(std::size_t chunks, Prepare&& prepare, Exchange&& exchange) {
  if (chunks <= 1) {
    prepare(std::size_t{0});
    exchange(std::size_t{0});
    return;
  }
  std::mutex m;
  std::condition_variable cv;
  std::size_t ready = 0;
  bool stop = false;
  std::exception_ptr failed;
  std::thread helper([&] {
    for (std::size_t c = 0; c < chunks; ++c) {
      {
        std::lock_guard lock(m);
        if (stop) return;
      }
      try {
        prepare(c);
      } catch (...) {
        std::lock_guard lock(m);
        failed = std::current_exception();
        cv.notify_all();
        return;
      }
      std::lock_guard lock(m);
      ready = c + 1;
      cv.notify_all();
    }
  });
  try {
    for (std::size_t c = 0; c < chunks; ++c) {
      {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return ready > c || failed; });
        if (ready <= c) break;
      }
      exchange(c);
    }
  } catch (...) {
    {
      std::lock_guard lock(m);
      stop = true;
    }
    helper.join();
    throw;
  }
  helper.join();
  if (failed) std::rethrow_exception(failed);
}

/// Allgather of variable-size messages around a ring. Each rank sends its message (messages[rank])
/// to its left neighbour and passes every message that arrives from its right neighbour on to the
/// left, unless the left neighbour is where it came from. Each rank sends and receives (N-1)
/// messages, the volume of a direct exchange, but every link carries one flow at a time instead
/// of N-1 at once: on 100 Mbit/s links TCP fills 0.97 of the link this way against 0.81-0.92 for
/// N-1 concurrent flows (docs/performance/collective.md), and the link is busy with one message
/// while the next arrives, so passing on costs no idle time.
/// messages[rank] holds this rank's frame on entry and is stamped with message_id{rank, seq}; every
/// messages[j] holds a stamped message afterwards (detail::frame_of gives its frame).
/// Messages reach rank r in the order r+1, r+2, ... (mod N) into messages[j], each checked against
/// `expect(j)` and its identity {j, seq} before it is passed on. `started()` runs once this rank's own message is on
/// its way; `use(j)` runs once per rank j: with `in_rank_order`, for j = 0, 1, ..., N-1 as soon as message j and every
/// message before it are in (so the caller can sum in rank order while later messages travel), else as each message
/// arrives, this rank's own first. Returns the bytes sent.
template <Transport T, class Expect, class Started, class Use>
std::size_t ring_allgather(T& t, std::vector<std::vector<std::byte>>& messages, std::vector<std::uint8_t>& arrived,
                           message_tag tag, std::uint32_t seq, bool in_rank_order, collective_context const& ctx,
                           deadline d, char const* what, Expect&& expect, Started&& started, Use&& use) {
  int const world = t.size(), r = t.rank();
  stamp(messages[static_cast<std::size_t>(r)], {static_cast<std::uint32_t>(r), seq});
  int const left = (r + world - 1) % world, right = (r + 1) % world;
  auto const w = static_cast<std::size_t>(world);
  std::size_t sent = 0;
  send_set<T> sends(t, w);
  auto pass_on = [&](std::size_t j) {
    sends.start(left, tag, messages[j], what, ctx);
    sent += messages[j].size();
  };
  if (world > 1) pass_on(static_cast<std::size_t>(r));
  started();
  arrived.assign(w, 0);
  std::size_t next = 0;
  auto arrive = [&](std::size_t j) {
    arrived[j] = 1;
    if (!in_rank_order) return use(j);
    while (next < w && arrived[next] != 0) use(next++);
  };
  arrive(static_cast<std::size_t>(r));
  for (int k = 1; k < world; ++k) {
    auto const origin = static_cast<std::size_t>((r + k) % world);
    (void)recv_message(t, right, tag, messages[origin], d, {static_cast<std::uint32_t>(origin), seq}, expect(origin),
                       what, ctx);
    if (k + 1 < world) pass_on(origin);
    arrive(origin);
  }
  sends.wait_all(d, what, ctx);
  return sent;
}

/// Exchange of distinct messages, one for each peer, in N-1 shifted steps (the pairwise
/// algorithm): at step k rank r sends message(r + k) to rank r + k and receives from rank r - k,
/// and starts step k + 1's send only once step k's has completed. All ranks being at the same step,
/// every link then carries about one flow at a time instead of N-1 at once (concurrent flows fill a
/// tbf-shaped link to 0.62-0.79 where one reaches 0.95; docs/performance/collective.md).
/// `message(j)` (stamped with message_id{rank, 0}) must stay valid until the call returns; `between(k)` runs once step
/// k's send has started (local work that overlaps the wire: encoding the next message); rank r - k's message is
/// received into buffer(r - k), checked against `expect(r - k)` and its identity {r - k, 0}, then
/// `use(r - k)` runs, so uses
/// come in the order r - 1, r - 2, ... Returns the bytes sent.
template <Transport T, class Message, class Buffer, class Expect, class Between, class Use>
std::size_t pairwise_exchange(T& t, message_tag tag, collective_context const& ctx, deadline d, char const* what,
                              Message&& message, Buffer&& buffer, Expect&& expect, Between&& between, Use&& use) {
  int const world = t.size(), r = t.rank();
  std::size_t sent = 0;
  pending_send<T> pending(t);
  for (int k = 1; k < world; ++k) {
    int const to = (r + k) % world, from = (r + world - k) % world;
    pending.wait(d, what, ctx);
    std::span<std::byte const> const m = message(static_cast<std::size_t>(to));
    pending.start(to, tag, m, what, ctx);
    sent += m.size();
    between(k);
    auto const j = static_cast<std::size_t>(from);
    (void)recv_message(t, from, tag, buffer(j), d, {static_cast<std::uint32_t>(from), 0}, expect(j), what, ctx);
    use(j);
  }
  pending.wait(d, what, ctx);
  return sent;
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
