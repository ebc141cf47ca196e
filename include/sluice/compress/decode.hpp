// sluice::decode and sluice::decode_add: the two ways callers decode a frame, spelled once for
// every codec on top of the one member a codec writes, decode_into(msg, ctx, ws, dense, mode).
#pragma once

#include <cstddef>
#include <span>
#include <utility>

#include <sluice/compress/concepts.hpp>

namespace sluice {

/// Validates the frame, then overwrites every element of `dense` with it (errc::malformed_message
/// before writing anything). `ws` is the codec's workspace for the element type of `dense`.
template <class C, class W, class Dense>
requires requires(C const& c, std::span<std::byte const> msg, encode_context const& ctx, W& ws, Dense&& dense) {
  c.decode_into(msg, ctx, ws, std::forward<Dense>(dense), overwrite);
}
void decode(C const& codec, std::span<std::byte const> msg, encode_context const& ctx, W& ws, Dense&& dense) {
  codec.decode_into(msg, ctx, ws, std::forward<Dense>(dense), overwrite);
}

/// As decode, but adds the decoded values into `dense` (aggregation).
template <class C, class W, class Dense>
requires requires(C const& c, std::span<std::byte const> msg, encode_context const& ctx, W& ws, Dense&& dense) {
  c.decode_into(msg, ctx, ws, std::forward<Dense>(dense), accumulate);
}
void decode_add(C const& codec, std::span<std::byte const> msg, encode_context const& ctx, W& ws, Dense&& dense) {
  codec.decode_into(msg, ctx, ws, std::forward<Dense>(dense), accumulate);
}

}  // namespace sluice
