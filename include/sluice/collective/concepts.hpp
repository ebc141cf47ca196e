// The public surface every collective shares: the per-call context (step, tensor, seed, deadline,
// tag base) and the encode_context each rank encodes with in a call (the wire protocol). No
// concept: collectives are function templates constrained by Transport and Codec.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/context.hpp>
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
  [[nodiscard]] encode_context for_rank(int rank, std::uint64_t salt = 0) const noexcept {
    std::uint64_t s = seed ^ (salt * 0x9E3779B97F4A7C15ull);
    s ^= s >> 31;
    return {.seed = salt == 0 ? seed : s,
            .rank = static_cast<std::uint32_t>(rank),
            .step = step,
            .tensor = tensor,
            .shape = {}};
  }

  friend bool operator==(collective_context const&, collective_context const&) = default;
};

/// Tags one collective call may use above its base tag.
inline constexpr std::uint32_t tags_per_collective = 16;

}  // namespace sluice

template <>
struct fmt::formatter<sluice::collective_context> : fmt::formatter<std::string_view> {
  auto format(sluice::collective_context const& c, format_context& ctx) const {
    return fmt::format_to(ctx.out(),
                          "collective_context{{.step = {}, .tensor = {}, .seed = {}, .timeout = {}ms, .tag = {}}}",
                          c.step, c.tensor, c.seed, c.timeout.count(), sluice::to_underlying(c.tag));
  }
};
