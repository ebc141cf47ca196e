// Waiting on transport requests, shared by the engines and the collectives: polling with a
// deadline, settling an abandoned send, peer checks and a dissemination barrier.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <thread>
#include <vector>

#include <sluice/core/error.hpp>
#include <sluice/transport/concepts.hpp>

namespace sluice {

namespace detail {

/// Polls `done()` until it returns true or the deadline passes; spins briefly, then yields, then
/// sleeps in short steps so that waiting ranks do not starve the cores they share.
template <class Done>
bool poll_until(Done&& done, deadline d) {
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (d.expired()) return done();
    if (i < 64)
      continue;
    else if (i < 256)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(i < 2048 ? 20 : 200));
  }
}

/// Makes sure the engine no longer reads the bytes of `r` before they are freed, on any exit path:
/// nothing when it has completed; otherwise the transport's cancel(r) where it has one (zmq), else
/// a wait of up to `grace` (local and MPI requests complete on their own; an MPI send to a stalled
/// peer that outlasts it is reported on stderr, see docs/transport.md). Never throws.
template <class T>
void settle_send(T& t, typename T::request& r,
                 std::chrono::milliseconds grace = std::chrono::milliseconds(5'000)) noexcept {
  try {
    if (r.test()) return;
    if constexpr (requires { t.cancel(r); }) {
      t.cancel(r);
    } else {
      r.wait(deadline::after(grace));
    }
  } catch (std::exception const& e) {
    std::fprintf(stderr, "sluice: rank %d: an abandoned send could not be settled: %s\n", t.rank(), e.what());
  }
}

inline void check_peer(int peer, int size, char const* who) {
  require(peer >= 0 && peer < size, errc::invalid_argument, "{}: peer {} is outside [0, {})", who, peer, size);
}

/// A dissemination barrier over point-to-point messages (Hensgen, Finkel & Manber 1988): ceil(log2 N)
/// rounds, each rank sending to rank + 2^k and receiving from rank - 2^k. Each token names its
/// barrier (`epoch`: how many barriers this endpoint entered before, equal on all ranks) and its
/// round; any other token (a duplicate, a stale one of an earlier barrier) is discarded, so a
/// lost token is a timeout and a duplicated one never lets a later barrier pass early.
template <class T>
void dissemination_barrier(T& t, message_tag tag, deadline d, std::vector<std::byte>& scratch, std::uint64_t epoch) {
  int const n = t.size(), r = t.rank();
  std::uint32_t round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    std::array<std::byte, 16> token{};
    std::memcpy(token.data(), &epoch, 8);
    std::memcpy(token.data() + 8, &round, 4);
    auto req = t.send((r + dist) % n, tag, std::span<std::byte const>(token));
    try {
      for (;;) {
        auto const m = t.recv((r - dist + n) % n, tag, scratch, d);
        if (m.size() == token.size() && std::memcmp(m.data(), token.data(), token.size()) == 0) break;
      }
      req.wait(d);
    } catch (...) {
      settle_send(t, req);  // `token` lives on this frame
      throw;
    }
  }
}

}  // namespace detail

}  // namespace sluice
