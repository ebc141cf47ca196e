// group: a sub-world of a transport (e.g. the group leaders of a hierarchical reduction) that is
// itself a Transport, so any collective runs on it unchanged. Ranks are renumbered 0..members-1.
#pragma once

#include <algorithm>
#include <vector>

#include <sluice/transport/concepts.hpp>
#include <sluice/transport/detail/progress.hpp>
#include <sluice/transport/local.hpp>

namespace sluice {

/// A view of `members` (ranks of the inner transport, in the order that defines group ranks).
/// The inner transport must outlive the view and this rank must be a member.
/// Thread-safety: as the inner transport.
template <Transport Inner>
class group {
 public:
  using transport_concept = transport_tag;
  using request = typename Inner::request;

  group(Inner& inner, std::vector<int> members) : inner_(&inner), members_(std::move(members)) {
    auto it = std::find(members_.begin(), members_.end(), inner.rank());
    require(it != members_.end(), errc::invalid_argument, "group: rank {} is not a member", inner.rank());
    for (int m : members_) detail::check_peer(m, inner.size(), "group");
    rank_ = static_cast<int>(it - members_.begin());
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return static_cast<int>(members_.size()); }
  /// The inner rank of group rank `r`.
  [[nodiscard]] int inner_rank(int r) const { return members_[static_cast<std::size_t>(r)]; }

  request send(int peer, message_tag tag, std::span<std::byte const> bytes) {
    detail::check_peer(peer, size(), "group::send");
    return inner_->send(inner_rank(peer), tag, bytes);
  }
  std::span<std::byte const> recv(int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d) {
    detail::check_peer(peer, size(), "group::recv");
    return inner_->recv(inner_rank(peer), tag, buffer, d);
  }
  void barrier(deadline d) {
    std::vector<std::byte> scratch;
    detail::dissemination_barrier(*this, barrier_tag + 1, d, scratch, barriers_++);
  }
  /// Settles a request on the inner transport (detail::settle_send).
  void cancel(request& r) { detail::settle_send(*inner_, r); }

 private:
  Inner* inner_;
  std::vector<int> members_;
  int rank_ = 0;
  std::uint64_t barriers_ = 0;
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice
