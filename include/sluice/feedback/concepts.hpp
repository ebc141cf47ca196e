// The Feedback concept: a regular policy value that compensates a gradient with per-tensor state,
// encodes it with any Codec and updates the state. State lives in feedback_state (outside the
// value) so policies compare, print and swap like codecs, and state checkpoints on its own.
// Declarations only: state, slice and workspace are defined in feedback/state.hpp, workspace.hpp.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include <sluice/compress/concepts.hpp>
#include <sluice/core/concepts.hpp>

namespace sluice {

/// What a feedback policy does with a NaN or Inf gradient (feedback/state.hpp).
enum class non_finite_policy : std::uint8_t;
/// The part of a feedback_state one encode call works on (feedback/state.hpp).
class feedback_slice;
/// Scratch of feedback policy calls with codec C on T (feedback/workspace.hpp).
template <class C, class T>
struct feedback_workspace;

/// Opt-in tag: a feedback policy declares `using feedback_concept = feedback_tag;`.
struct feedback_tag {};

/// A feedback policy:
///  - `state_kind`: a stable id written into checkpoints (a state restores only into its kind);
///  - `state_buffers`: per-tensor buffers its feedback_state holds (0..2);
///  - `non_finite`: the non_finite_policy value;
///  - `precision` (optional, default f32): f32 or bf16 state.
template <class F>
concept Feedback = std::regular<F> && std::derived_from<typename F::feedback_concept, feedback_tag> &&
    requires(F const& f) {
  { F::state_kind } -> std::convertible_to<std::uint16_t>;
  { F::state_buffers } -> std::convertible_to<std::size_t>;
  { f.non_finite } -> std::convertible_to<non_finite_policy>;
};

/// A feedback policy F usable with codec C on gradients of T. encode(c, s, grad, ctx, ws, out):
///  - `s` is the slice of feedback_state the gradient belongs to (a tensor or a chunk of one);
///    the state of a whole model is one value, and a call
///    names its part, so chunked and whole-tensor calls share residuals element for element;
///  - applies the state's warm-up schedule to `c` for step ctx.step (one mechanism for every codec);
///  - validates everything, then scans for non-finite values and applies `non_finite`, all before
///    any state changes; returns the frame size (0 when the call was skipped);
///  - `ws` holds the codec's workspace and the feedback's scratch (feedback_workspace<C, T>).
template <class F, class C, class T = float>
concept FeedbackFor = Feedback<F> && Codec<C, T> &&
    requires(F const& f, C const& c, feedback_slice s, std::span<T const> grad, encode_context const& ctx,
             feedback_workspace<C, T>& ws, std::span<std::byte> out) {
  { f.encode(c, s, grad, ctx, ws, out) } -> std::same_as<std::size_t>;
};

}  // namespace sluice
