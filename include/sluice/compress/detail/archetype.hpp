// The least a Codec provides, declared and never defined: feedback policies and collectives state
// their conformance against it where they are defined, without including a concrete codec.
#pragma once

#include <cstddef>
#include <span>

#include <sluice/compress/concepts.hpp>
#include <sluice/core/serial.hpp>

namespace sluice::detail::compress {

/// A Codec for every Element type with nothing optional (no strength, no fused path, dense only).
struct codec_archetype {
  using codec_concept = codec_tag;
  friend bool operator==(codec_archetype const&, codec_archetype const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, codec_archetype const&) { h("codec_archetype"); }

  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept;
  template <Element T>
  std::size_t encode(std::span<T const> in, encode_context const& ctx, codec_workspace<codec_archetype, T>& ws,
                     std::span<std::byte> out) const;
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, codec_workspace<codec_archetype, T>& ws,
                   std::span<T> dense, M mode) const;
};

}  // namespace sluice::detail::compress
