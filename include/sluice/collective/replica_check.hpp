// replica_check: whether every rank holds the same parameters, bit for bit, in one collective call
// over any Transport, and (replica_monitor) the first step at which they stopped doing so when
// checked every k steps. Each rank hashes each of its tensors (64-bit digests of the values' bits),
// sends the list to every other rank, and every rank compares the same lists, so all ranks return
// the same report.
//
//   sluice::replica_report const r = sluice::check_replicas(transport, params, {.step = step});
//   if (!r.agree) fmt::print("{}\n", r.describe());   // ranks 2 differ from rank 0 in tensor 1 ...
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <sluice/collective/concepts.hpp>
#include <sluice/core/detail/decimal_list.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/transport/concepts.hpp>
#include <sluice/transport/detail/progress.hpp>

namespace sluice {

/// 64-bit digest of one tensor's values: their bits (so -0.0 and 0.0, or two NaN payloads, differ)
/// and their count, 8 bytes at a time. The same on every rank, build and run; equal tensors give
/// equal digests, and a changed value changes it but with probability 2^-64.
inline std::uint64_t tensor_digest(std::span<float const> values) noexcept {
  auto const bytes = std::as_bytes(values);
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(values.size()) * 0xC2B2AE3D27D4EB4Full);
  auto mix = [&h](std::uint64_t w) {
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  };
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, 8);
    mix(w);
  }
  if (i < bytes.size()) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, bytes.size() - i);
    mix(w ^ 0x8000000000000000ull);
  }
  std::array<std::byte, 8> last{};
  std::memcpy(last.data(), &h, 8);
  return serial::stable_hash(last);
}

/// What check_replicas found; every rank of the call holds an equal report.
struct replica_report {
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  std::uint64_t step = 0;              ///< the call's ctx.step
  bool agree = true;                   ///< every rank's tensors equal rank 0's, bit for bit
  std::uint64_t digest = 0;            ///< rank 0's digest over all its tensors
  std::vector<int> differing_ranks{};  ///< ranks whose parameters differ from rank 0's, ascending
  std::size_t first_tensor = none;     ///< the lowest tensor index where some rank differs
  std::vector<std::size_t> tensors{};  ///< every tensor index where some rank differs, ascending

  /// One line: "step 40: replicas agree (digest ...)" or which ranks differ in which tensors.
  [[nodiscard]] std::string describe() const {
    if (agree) return fmt::format("step {}: replicas agree (digest {:016x})", step, digest);
    return fmt::format("step {}: rank(s) {} hold parameters that differ from rank 0's in tensor(s) {} (first: {})",
                       step, detail::decimal_list(differing_ranks), detail::decimal_list(tensors), first_tensor);
  }
  friend bool operator==(replica_report const&, replica_report const&) = default;
};

/// Collective: every rank passes its parameter tensors (a range of spans of float: the spans given
/// to pipeline::attach) in the same order; returns, on every rank, whether all ranks hold the same
/// bits and, if not, which ranks and tensors differ. One message of 16 + 8 x tensors bytes from
/// each rank to each other rank, on tag ctx.tag; the whole call is bounded by ctx.timeout.
/// Errors (on every rank that sees them): errc::size_mismatch when ranks pass different numbers of
/// tensors, errc::malformed_message for a message that is not a digest list of this call (another
/// step), errc::timeout / errc::peer_lost from the transport.
/// The transport must be one no other thread is using: a pipeline's exchange thread owns its
/// transport after attach, so check over a second one (docs/collective.md, "Replica check").
template <Transport T, std::ranges::input_range Tensors>
requires std::convertible_to<std::ranges::range_reference_t<Tensors const&>, std::span<float const>> replica_report
check_replicas(T& t, Tensors const& tensors, collective_context const& ctx = {}) {
  int const world = t.size(), me = t.rank();
  std::vector<std::uint64_t> mine;
  for (auto&& x : tensors) mine.push_back(tensor_digest(std::span<float const>(x)));

  std::vector<std::byte> msg;
  serial::put(msg, ctx.step);
  serial::put(msg, static_cast<std::uint64_t>(mine.size()));
  for (std::uint64_t d : mine) serial::put(msg, d);

  deadline const d = deadline::after(ctx.timeout);
  std::vector<std::vector<std::uint64_t>> all(static_cast<std::size_t>(world));
  all[static_cast<std::size_t>(me)] = mine;
  std::vector<typename T::request> sends;
  sends.reserve(static_cast<std::size_t>(world));
  try {
    for (int k = 1; k < world; ++k) sends.push_back(t.send((me + k) % world, ctx.tag, std::span<std::byte const>(msg)));
    std::vector<std::byte> buffer;
    for (int k = 1; k < world; ++k) {
      int const peer = (me + world - k) % world;
      auto const m = t.recv(peer, ctx.tag, buffer, d);
      serial::reader r(m);
      std::uint64_t step = 0, count = 0;
      require(r.get(step) && r.get(count) && m.size() == 16 + 8 * count, errc::malformed_message,
              "check_replicas: rank {}: {} bytes from rank {} are not a digest list (step {}, tag {})", me, m.size(),
              peer, ctx.step, to_underlying(ctx.tag));
      require(step == ctx.step, errc::malformed_message,
              "check_replicas: rank {}: rank {} checked step {} while this rank checks step {}; call it at the same "
              "step on every rank",
              me, peer, step, ctx.step);
      require(count == mine.size(), errc::size_mismatch,
              "check_replicas: rank {} passed {} tensors and rank {} passed {}; pass every rank's parameters in the "
              "same layout",
              me, mine.size(), peer, count);
      auto& theirs = all[static_cast<std::size_t>(peer)];
      theirs.resize(count);
      for (auto& x : theirs) (void)r.get(x);
    }
    for (auto& s : sends) s.wait(d);
  } catch (...) {
    for (auto& s : sends) detail::settle_send(t, s);  // `msg` lives on this frame
    throw;
  }

  replica_report rep{.step = ctx.step};
  std::vector<std::byte> all0;
  for (std::uint64_t x : all[0]) serial::put(all0, x);
  rep.digest = serial::stable_hash(all0);
  for (std::size_t i = 0; i < all[0].size(); ++i) {
    bool differs = false;
    for (std::size_t j = 1; j < all.size(); ++j) differs = differs || all[j][i] != all[0][i];
    if (differs) rep.tensors.push_back(i);
  }
  for (std::size_t j = 1; j < all.size(); ++j)
    if (all[j] != all[0]) rep.differing_ranks.push_back(static_cast<int>(j));
  rep.agree = rep.differing_ranks.empty();
  if (!rep.tensors.empty()) rep.first_tensor = rep.tensors.front();
  return rep;
}

/// Checks the replicas every `every` steps and remembers the first check at which they differed:
/// the replicas diverged after `last_agreement()` and at or before `first_difference()` (with
/// every = 1, at exactly that step). step() is a collective call on the check steps.
class replica_monitor {
 public:
  /// errc::invalid_argument for every == 0. `base` gives the tag and timeout of each check (its
  /// step is replaced by the step checked).
  explicit replica_monitor(std::uint64_t every, collective_context base = {}) : every_(every), base_(base) {
    require(every > 0, errc::invalid_argument, "replica_monitor: every must be at least 1 (checks every k steps)");
  }

  /// On every rank after step `at`'s update (after pipeline::step(), whose parameters are the same on
  /// every rank at every step): checks when at % every == 0 and returns that check's report,
  /// else nothing and no communication.
  template <Transport T, std::ranges::input_range Tensors>
  requires std::convertible_to<std::ranges::range_reference_t<Tensors const&>, std::span<float const>>
      std::optional<replica_report> step(T& t, std::uint64_t at, Tensors const& tensors) {
    if (at % every_ != 0) return std::nullopt;
    collective_context ctx = base_;
    ctx.step = at;
    replica_report r = check_replicas(t, tensors, ctx);
    if (!r.agree && !first_.has_value()) first_ = r;
    if (r.agree && !first_.has_value()) last_agreed_ = at;
    return r;
  }

  /// The first checked step whose replicas differed, or nothing while they have always agreed.
  [[nodiscard]] std::optional<std::uint64_t> first_difference() const noexcept {
    return first_ ? std::optional<std::uint64_t>(first_->step) : std::nullopt;
  }
  /// The last checked step before first_difference() at which the replicas agreed (or nothing).
  [[nodiscard]] std::optional<std::uint64_t> last_agreement() const noexcept { return last_agreed_; }
  /// The report of the first check that found a difference.
  [[nodiscard]] std::optional<replica_report> const& first_report() const noexcept { return first_; }
  [[nodiscard]] std::uint64_t every() const noexcept { return every_; }

 private:
  std::uint64_t every_;
  collective_context base_;
  std::optional<replica_report> first_{};
  std::optional<std::uint64_t> last_agreed_{};
};

}  // namespace sluice
