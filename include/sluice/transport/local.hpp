// local: N transport endpoints in one process, one per thread, for tests and single-node runs.
// Messages are copied into pooled buffers, so a steady exchange of same-sized messages allocates nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <sluice/transport/concepts.hpp>
#include <sluice/transport/detail/progress.hpp>

namespace sluice {

namespace detail {

struct local_mailbox {
  std::mutex m;
  std::condition_variable cv;
  std::map<std::pair<int, std::uint32_t>, std::deque<std::vector<std::byte>>> queues;  // (source, tag)
};

struct local_world {
  explicit local_world(int n)
      : size(n),
        boxes(static_cast<std::size_t>(n)),
        alive(static_cast<std::size_t>(n)),
        barriers(static_cast<std::size_t>(n)) {
    for (auto& a : alive) a.store(true);
    for (auto& b : barriers) b.store(0);
  }
  int size;
  std::vector<local_mailbox> boxes;
  std::vector<std::atomic<bool>> alive;
  std::vector<std::atomic<std::uint64_t>> barriers;  // barriers each rank has entered
  std::mutex pool_m;
  std::vector<std::vector<std::byte>> pool;  // spare buffers, capacity kept

  std::vector<std::byte> take(std::size_t n) {
    std::vector<std::byte> b;
    {
      std::lock_guard lock(pool_m);
      if (!pool.empty()) {
        b = std::move(pool.back());
        pool.pop_back();
      }
    }
    b.resize(n);
    return b;
  }
  void give(std::vector<std::byte>&& b) {
    if (b.capacity() == 0) return;
    std::lock_guard lock(pool_m);
    pool.push_back(std::move(b));
  }
  void wake_all() {
    for (auto& box : boxes) {
      std::lock_guard lock(box.m);
      box.cv.notify_all();
    }
  }
};

}  // namespace detail

/// One endpoint of an in-process world. A cheap handle: copies share the world.
/// Thread-safety: every member may be called from any thread concurrently; typically each
/// endpoint is driven by its own thread.
class local_transport {
 public:
  using transport_concept = transport_tag;

  /// Sends complete when the message is queued at the receiver, so the request is always done.
  struct request {
    [[nodiscard]] bool test() const noexcept { return true; }
    void wait(deadline) const noexcept {}
  };

  /// Makes a world of `n` endpoints; element r is rank r.
  [[nodiscard]] static std::vector<local_transport> create(int n) {
    require(n >= 1, errc::invalid_argument, "local_transport::create: world size {} must be >= 1", n);
    auto w = std::make_shared<detail::local_world>(n);
    std::vector<local_transport> eps;
    eps.reserve(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) eps.push_back(local_transport(w, r));
    return eps;
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return world_->size; }

  request send(int peer, message_tag tag, std::span<std::byte const> bytes) {
    detail::check_peer(peer, size(), "local_transport::send");
    check_self("send");
    require(alive(peer), errc::peer_lost, "local_transport: rank {} sending to rank {} (tag {}): peer lost", rank_,
            peer, to_underlying(tag));
    auto buf = world_->take(bytes.size());
    if (!bytes.empty()) std::memcpy(buf.data(), bytes.data(), bytes.size());
    auto& box = world_->boxes[static_cast<std::size_t>(peer)];
    {
      std::lock_guard lock(box.m);
      box.queues[{rank_, to_underlying(tag)}].push_back(std::move(buf));
    }
    box.cv.notify_all();
    return {};
  }

  std::span<std::byte const> recv(int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d) {
    detail::check_peer(peer, size(), "local_transport::recv");
    check_self("recv");
    auto& box = world_->boxes[static_cast<std::size_t>(rank_)];
    std::unique_lock lock(box.m);
    auto& q = box.queues[{peer, to_underlying(tag)}];
    bool const ready = box.cv.wait_until(lock, d.at, [&] { return !q.empty() || !alive(peer) || !alive(rank_); });
    if (!q.empty() && alive(rank_)) {
      std::swap(buffer, q.front());
      auto old = std::move(q.front());
      q.pop_front();
      lock.unlock();
      world_->give(std::move(old));
      return buffer;
    }
    lock.unlock();
    check_self("recv");
    if (ready)
      throw_error(errc::peer_lost, "local_transport: rank {} waiting for rank {} (tag {}): peer lost", rank_, peer,
                  to_underlying(tag));
    throw_error(errc::timeout, "local_transport: rank {} waiting for rank {} (tag {}): deadline passed", rank_, peer,
                to_underlying(tag));
  }

  void barrier(deadline d) {
    std::vector<std::byte> scratch;
    detail::dissemination_barrier(*this, barrier_tag, d, scratch, enter_barrier());
  }
  /// Counts a barrier this endpoint enters; returns its number (0, 1, ...). See Transport.
  std::uint64_t enter_barrier() noexcept { return world_->barriers[static_cast<std::size_t>(rank_)].fetch_add(1); }

  /// Declares this endpoint dead: its own calls and every peer's wait on it fail with peer_lost.
  void kill() {
    world_->alive[static_cast<std::size_t>(rank_)].store(false);
    world_->wake_all();
  }
  [[nodiscard]] bool alive(int r) const noexcept { return world_->alive[static_cast<std::size_t>(r)].load(); }

 private:
  local_transport(std::shared_ptr<detail::local_world> w, int r) : world_(std::move(w)), rank_(r) {}
  void check_self(char const* op) const {
    require(alive(rank_), errc::peer_lost, "local_transport: rank {} was killed ({} refused)", rank_, op);
  }

  std::shared_ptr<detail::local_world> world_;
  int rank_ = 0;
};
// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice
