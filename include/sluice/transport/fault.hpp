// Fault injection around any transport: delay, drop, duplicate, corrupt one byte, or kill the
// endpoint at a chosen send, barrier tokens included. Used by the fault tests to prove that every
// failure becomes an error or is absorbed, never a hang or a silent disagreement between ranks.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include <sluice/transport/concepts.hpp>
#include <sluice/transport/detail/progress.hpp>
#include <sluice/transport/local.hpp>

namespace sluice {

/// What goes wrong, counted over this endpoint's sends (to `peer` only when peer >= 0).
struct fault_plan {
  std::chrono::milliseconds delay{0};  ///< added before every matching send
  std::int64_t stall_send = -1;        ///< index of a matching send preceded by a stall (the endpoint stays alive)
  std::chrono::milliseconds stall{0};  ///< how long that send waits
  std::int64_t drop_send = -1;         ///< 0-based index of a matching send that silently vanishes
  std::int64_t duplicate_send = -1;    ///< index of a matching send that is delivered twice
  std::int64_t corrupt_send = -1;      ///< index of a matching send with one byte flipped
  std::size_t corrupt_offset = 100;    ///< byte flipped (clamped into the message)
  std::int64_t kill_at_send = -1;      ///< the endpoint dies instead of making this matching send
  int peer = -1;                       ///< faults apply only to sends to this rank; -1: any
  friend bool operator==(fault_plan const&, fault_plan const&) = default;
};

/// Wraps a transport (by reference; it must outlive the wrapper) and injects the faults of a plan.
/// Sends are counted in the order this endpoint makes them, barrier tokens included when the inner
/// transport's barrier is the dissemination barrier (local, zmq: it has enter_barrier()); an MPI
/// barrier is the engine's own and passes through untouched.
/// Killing calls the inner transport's kill() when it has one (local), so peers see peer_lost;
/// otherwise the endpoint falls silent and peers see timeout. Every later call on a killed
/// endpoint throws errc::peer_lost.
/// Thread-safety: as the inner transport for recv; sends are counted with an atomic.
template <Transport Inner>
class faulty {
 public:
  using transport_concept = transport_tag;

  struct request {
    typename Inner::request inner{};
    std::shared_ptr<std::vector<std::byte>> keep{};  // corrupted copy kept alive until completion
    bool sent = true;
    typename Inner::request twin{};  // the second delivery of a duplicated send
    bool twice = false;
    [[nodiscard]] bool test() { return !sent || (inner.test() && (!twice || twin.test())); }
    void wait(deadline d) {
      if (sent) inner.wait(d);
      if (twice) twin.wait(d);
    }
  };

  faulty(Inner& inner, fault_plan plan) : inner_(&inner), plan_(plan) {}

  [[nodiscard]] int rank() const noexcept { return inner_->rank(); }
  [[nodiscard]] int size() const noexcept { return inner_->size(); }
  [[nodiscard]] fault_plan const& plan() const noexcept { return plan_; }
  [[nodiscard]] bool killed() const noexcept { return killed_.load(); }

  request send(int peer, message_tag tag, std::span<std::byte const> bytes) {
    check_self();
    if (plan_.peer >= 0 && peer != plan_.peer) return {inner_->send(peer, tag, bytes), nullptr, true};
    std::int64_t const i = sends_.fetch_add(1);
    if (i == plan_.kill_at_send) {
      kill();
      check_self();
    }
    if (plan_.delay.count() > 0) std::this_thread::sleep_for(plan_.delay);
    if (i == plan_.stall_send) std::this_thread::sleep_for(plan_.stall);
    if (i == plan_.drop_send) return {typename Inner::request{}, nullptr, false};
    if (i == plan_.duplicate_send) {
      request r{inner_->send(peer, tag, bytes), nullptr, true};
      r.twin = inner_->send(peer, tag, bytes);
      r.twice = true;
      return r;
    }
    if (i == plan_.corrupt_send && !bytes.empty()) {
      auto copy = std::make_shared<std::vector<std::byte>>(bytes.begin(), bytes.end());
      std::size_t const at = std::min(plan_.corrupt_offset, copy->size() - 1);
      (*copy)[at] ^= std::byte{0x5a};
      return {inner_->send(peer, tag, *copy), copy, true};
    }
    return {inner_->send(peer, tag, bytes), nullptr, true};
  }

  std::span<std::byte const> recv(int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d) {
    check_self();
    return inner_->recv(peer, tag, buffer, d);
  }

  void barrier(deadline d) {
    check_self();
    if constexpr (requires(Inner & t) { t.enter_barrier(); }) {
      std::vector<std::byte> scratch;
      detail::dissemination_barrier(*this, barrier_tag, d, scratch, inner_->enter_barrier());
    } else {
      inner_->barrier(d);
    }
  }

  /// Settles a request of this wrapper on the inner transport (detail::settle_send).
  void cancel(request& r) {
    if (r.sent) detail::settle_send(*inner_, r.inner);
    if (r.twice) detail::settle_send(*inner_, r.twin);
  }

  void kill() {
    killed_.store(true);
    if constexpr (requires(Inner & t) { t.kill(); }) inner_->kill();
  }

 private:
  void check_self() const {
    require(!killed_.load(), errc::peer_lost, "faulty: rank {} was killed by fault injection", inner_->rank());
  }
  Inner* inner_;
  fault_plan plan_;
  std::atomic<std::int64_t> sends_{0};
  std::atomic<bool> killed_{false};
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::fault_plan> : fmt::formatter<std::string_view> {
  auto format(sluice::fault_plan const& p, format_context& ctx) const {
    return fmt::format_to(
        ctx.out(),
        "fault_plan{{.delay = {}ms, .stall_send = {}, .stall = {}ms, .drop_send = {}, .duplicate_send = {}, "
        ".corrupt_send = {}, .corrupt_offset = {}, "
        ".kill_at_send = {}, .peer = {}}}",
        p.delay.count(), p.stall_send, p.stall.count(), p.drop_send, p.duplicate_send, p.corrupt_send, p.corrupt_offset,
        p.kill_at_send, p.peer);
  }
};
