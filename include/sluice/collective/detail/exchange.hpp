// detail/exchange: the schedules collectives are built from: near-equal parts and chunks, the
// overlap of one chunk's local work with the previous chunk's exchange, the ring allgather and the
// pairwise exchange of framed messages.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include <sluice/collective/concepts.hpp>
#include <sluice/collective/detail/message.hpp>
#include <sluice/transport/concepts.hpp>

namespace sluice::detail {

/// Splits [0, n) into `parts` contiguous ranges of near-equal size; range i is [begin(i), begin(i+1)).
constexpr std::size_t part_begin(std::size_t n, std::size_t parts, std::size_t i) noexcept {
  return n / parts * i + std::min(i, n % parts);
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

}  // namespace sluice::detail
