// The Codec concept: a regular policy value that turns a dense span into one wire frame
// (core/wire.hpp) and back. Per-tensor mutable state lives in a workspace the caller owns,
// so codecs stay comparable, printable values the solver can swap between steps.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include <sluice/core/element.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/core/wire.hpp>

namespace sluice {

/// Opt-in tag: a codec declares `using codec_concept = codec_tag;`.
struct codec_tag {};

/// Everything an encode or decode call may need besides the data. Built by the caller per
/// (tensor, step); cheap to copy. Random codecs draw from stream_key{seed, rank, step, tensor};
/// codecs with shared randomness use key().shared() so that every rank draws the same numbers.
struct encode_context {
  std::uint64_t seed = 0;                ///< job-wide seed
  std::uint32_t rank = 0;                ///< this rank
  std::uint64_t step = 0;                ///< training step, written to the frame header
  std::uint64_t tensor = 0;              ///< tensor or bucket id, written to the frame header
  std::span<std::size_t const> shape{};  ///< logical shape (low-rank codecs); empty means 1-D

  /// The random-stream key for this (seed, rank, step, tensor).
  [[nodiscard]] constexpr stream_key key() const noexcept {
    return {seed, rank, static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(tensor)};
  }
};

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

/// A codec for element type T (float, Eigen::half or Eigen::bfloat16).
///  - max_encoded_bytes(n): exact upper bound on the frame size for n elements; caller sizes `out`.
///  - encode(in, ctx, ws, out): validates, writes one frame, returns its size. Throws
///    errc::invalid_argument for bad policy values and errc::size_mismatch for a short `out`, before
///    writing anything.
///  - decode(msg, ctx, ws, dense): validates the whole frame first (errc::malformed_message), then
///    overwrites every element of `dense`.
///  - decode_add(msg, ctx, ws, dense): as decode, but adds into `dense` (aggregation).
template <class C, class T = float>
concept Codec = Element<T> && std::regular<C> && std::derived_from<typename C::codec_concept, codec_tag> &&
    requires(C const& c, std::size_t n, std::span<T const> in, encode_context const& ctx, codec_workspace<C, T>& ws,
             std::span<std::byte> out, std::span<std::byte const> msg, std::span<T> dense) {
  { c.max_encoded_bytes(n) } -> std::same_as<std::size_t>;
  { c.encode(in, ctx, ws, out) } -> std::same_as<std::size_t>;
  c.decode(msg, ctx, ws, dense);
  c.decode_add(msg, ctx, ws, dense);
};

/// A codec whose frames also decode to a sparse tensor (indices + values), for sparse
/// aggregation and sparse optimizer steps without a dense round trip.
template <class C, class T = float>
concept SparseCodec = Codec<C, T> && codec_traits<C>::is_sparse &&
    requires(C const& c, std::span<std::byte const> msg, encode_context const& ctx, codec_workspace<C, T>& ws,
             sparse_buffer<T>& out) {
  c.decode_sparse(msg, ctx, ws, out);
};

}  // namespace sluice
