// The Codec concept: a regular policy value that turns a dense span into one wire frame
// (core/wire.hpp) and back. Per-tensor mutable state lives in a workspace the caller owns,
// so codecs stay comparable, printable values the solver can swap between steps. Declarations
// only: the context is defined in compress/context.hpp, sparse_buffer in core/sparse.hpp.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include <sluice/core/concepts.hpp>

namespace sluice {

/// Opt-in tag: a codec declares `using codec_concept = codec_tag;`.
struct codec_tag {};

/// Per-call inputs of encode and decode besides the data (compress/context.hpp).
struct encode_context;

/// Indices + values of a sparse tensor (core/sparse.hpp): what SparseCodec decodes to.
template <class T, class Index>
class sparse_buffer;

namespace detail {
template <class C, class T, class = void>
struct workspace_of {
  struct type {};  // codecs without state get an empty workspace
};
template <class C, class T>
struct workspace_of<C, T, std::void_t<typename C::template workspace<T>>> {
  using type = typename C::template workspace<T>;
};
}  // namespace detail

/// Per-tensor scratch and state of codec C for element type T: `C::workspace<T>` when the codec
/// declares one, else an empty struct. Sized on first use, reused afterwards (no allocation in the
/// steady state). Not shared between threads.
template <class C, class T>
using codec_workspace = typename detail::workspace_of<C, T>::type;

/// Static properties collectives and the pipeline dispatch on. A codec states them with static
/// constexpr members of the same names; missing members take these defaults.
template <class C>
struct codec_traits {
  static constexpr bool is_sparse = requires { requires C::is_sparse; };                  ///< decodes to a sparse_view
  static constexpr bool shared_randomness = requires { requires C::shared_randomness; };  ///< indices not sent
  static constexpr bool unbiased = requires { requires C::unbiased; };                    ///< E[decode(encode(x))] == x
  static constexpr bool is_quantizer = requires { requires C::is_quantizer; };            ///< dense, per-bucket scaled
  static constexpr std::size_t block_size = [] {
    if constexpr (requires { C::block_size; })
      return static_cast<std::size_t>(C::block_size);
    else
      return std::size_t{1};
  }();
};

/// How decode_into writes `dense`: overwrite every element, or add the decoded values into it
/// (aggregation). Tag types, so a codec picks its loop at compile time, never per element.
struct overwrite_t {
  static constexpr bool accumulates = false;
};
struct accumulate_t {
  static constexpr bool accumulates = true;
};
inline constexpr overwrite_t overwrite{};    ///< decode_into replaces every element of `dense`
inline constexpr accumulate_t accumulate{};  ///< decode_into adds into `dense`

/// overwrite_t or accumulate_t.
template <class M>
concept DecodeMode = std::same_as<M, overwrite_t> || std::same_as<M, accumulate_t>;

/// A codec for element type T (float, half or bfloat16).
///  - max_encoded_bytes(n): exact upper bound on the frame size for n elements; caller sizes `out`.
///  - encode(in, ctx, ws, out): validates, writes one frame, returns its size. Throws
///    errc::invalid_argument for bad policy values and errc::size_mismatch for a short `out`, before
///    writing anything.
///  - decode_into(msg, ctx, ws, dense, mode): validates the whole frame first
///    (errc::malformed_message), then overwrites every element of `dense` (mode overwrite) or adds
///    into it (mode accumulate). Callers write sluice::decode / sluice::decode_add
///    (compress/decode.hpp), which name the mode.
/// Optional members a codec may offer (detected, never required):
///  - `static constexpr codec_strength<C, V> strength{...}`: the one number warm-up moves
///    (feedback/warmup.hpp); a codec without it cannot be warmed up.
///  - `encode_compensated<S>(grad, slice, ctx, ws, out)`: a fused error-feedback path that
///    feedback/residual.hpp detects: c = grad + residual and the frame of c in one pass, leaving
///    residual = c - decode(frame), bit for bit what the unfused composition leaves; returns the
///    frame size. `slice` is the feedback_slice of the call: `buffer<S>(0)` is the residual (S is
///    float or bfloat16, stored through compress/detail/residual.hpp's rounding),
///    `offset()`, `tensor()` key that rounding, `state().record_non_finite(count)` reports NaN/Inf.
///    A codec constrains S and T to the combinations it fuses; others take the generic path.
template <class C, class T = float>
concept Codec = Element<T> && std::regular<C> && std::derived_from<typename C::codec_concept, codec_tag> &&
    requires(C const& c, std::size_t n, std::span<T const> in, encode_context const& ctx, codec_workspace<C, T>& ws,
             std::span<std::byte> out, std::span<std::byte const> msg, std::span<T> dense) {
  { c.max_encoded_bytes(n) } -> std::same_as<std::size_t>;
  { c.encode(in, ctx, ws, out) } -> std::same_as<std::size_t>;
  c.decode_into(msg, ctx, ws, dense, overwrite);
  c.decode_into(msg, ctx, ws, dense, accumulate);
};

/// The one number warm-up moves in a codec, declared by the codec itself:
///   static constexpr codec_strength<top_k, double> strength{&top_k::ratio, "fraction kept", 0.25};
/// An integral member (bits, levels, rank) takes the ramp's values rounded to nearest.
template <class C, class V>
struct codec_strength {
  using field = V C::*;   ///< a pointer to a data member of C of type V
  field member;           ///< the policy field warm-up moves
  std::string_view unit;  ///< what the number counts, for messages ("fraction kept", "bits")
  double warm_start = 0;  ///< where a ramp with warmup::start == 0 begins, in the member's unit
  bool relative = false;  ///< warm_start multiplies the codec's own strength (PowerSGD: 4x its rank)
};

namespace detail {
template <class C, class S>
inline constexpr bool is_codec_strength = false;
template <class C, class V>
inline constexpr bool is_codec_strength<C, codec_strength<C, V> const> = true;
}  // namespace detail

/// A codec that declares its strength (`static constexpr codec_strength<C, V> strength`), so a
/// warm-up schedule can ramp it. Codecs without one (identity, cast, sign) cannot be warmed up.
template <class C>
concept WarmableCodec = requires {
  C::strength;
  requires detail::is_codec_strength<C, decltype(C::strength)>;
};

/// A codec whose frames also decode to a sparse tensor (indices + values), for sparse
/// aggregation and sparse optimizer steps without a dense round trip.
template <class C, class T = float>
concept SparseCodec = Codec<C, T> && codec_traits<C>::is_sparse &&
    requires(C const& c, std::span<std::byte const> msg, encode_context const& ctx, codec_workspace<C, T>& ws,
             sparse_buffer<T, std::uint32_t>& out) {
  c.decode_sparse(msg, ctx, ws, out);
};

}  // namespace sluice
