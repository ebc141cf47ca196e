// device_codec<C>: what the device backend knows of a codec, the one customization point of
// cuda::allreduce (as codec_traits is for the CPU collectives). A specialization says how many
// bytes one rank's payload takes, which scratch the device encoder needs, how the encoder writes
// the payload (error feedback fused) and how a gathered payload is added into a dense sum, with the
// CPU codec's bits: maxmin_quantize, top_k, block_top_k and random_k have one.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/random_k.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/core/error.hpp>
#include <sluice/cuda/block_top_k.cuh>
#include <sluice/cuda/maxmin.cuh>
#include <sluice/cuda/random_k.cuh>
#include <sluice/cuda/scatter.cuh>
#include <sluice/cuda/top_k.cuh>

namespace sluice::cuda {

/// The device side of codec C; specialized below for the codecs the device encodes. A
/// specialization has `scratch` (constructible from (n, codec)), `payload_bytes(codec, n)`
/// (validates the codec for the device), `draw_key(key)` (the key the slot header carries: the
/// shared key when every rank must draw the same indices, else an empty one), and the two steps
/// `encode(codec, g, e, key, scratch, payload, non_finite, stream)` and
/// `add(sum, codec, scratch, payload, stream)`, both returning a device_status.
template <class C>
struct device_codec;

/// A codec the device backend encodes and decodes (device_codec<C> is specialized).
template <class C>
concept DeviceCodec = requires(C const& c, std::size_t n) {
  typename device_codec<C>::scratch;
  { device_codec<C>::payload_bytes(c, n) } -> std::same_as<std::size_t>;
};

/// Max-min quantization: the payload is the frame's ranges and levels sections (feedback_maxmin),
/// decoded with dequantize_add.
template <>
struct device_codec<maxmin_quantize> {
  struct scratch {
    scratch(std::size_t, maxmin_quantize const&) noexcept {}
  };
  static maxmin_params params(maxmin_quantize const& c) {
    c.validate();
    return {c.bits, static_cast<unsigned>(c.bucket), c.round == rounding::stochastic};
  }
  static std::size_t payload_bytes(maxmin_quantize const& c, std::size_t n) {
    return maxmin_payload_bytes(n, params(c));
  }
  static stream_key draw_key(stream_key const&) noexcept { return {}; }
  static device_status encode(maxmin_quantize const& c, std::span<float const> g, std::span<float> e,
                              stream_key const& key, scratch&, std::span<std::byte> payload,
                              unsigned long long* non_finite, cudaStream_t s) {
    return feedback_maxmin(g, e, params(c), key, payload, non_finite, s);
  }
  static device_status add(std::span<float> sum, maxmin_quantize const& c, scratch const&,
                           std::span<std::byte const> payload, cudaStream_t s) {
    return dequantize_add(sum, params(c), payload, s);
  }
};

/// Top-k: the payload is k = c.keep(n) indices then their values (top_k_select), added with
/// scatter_add.
template <>
struct device_codec<top_k> {
  class scratch {
   public:
    scratch(std::size_t n, top_k const&) : select_(n) {}

   private:
    friend struct device_codec<top_k>;
    top_k_workspace select_;
  };
  static std::size_t payload_bytes(top_k const& c, std::size_t n) {
    c.validate();
    return 8 * c.keep(n);
  }
  static stream_key draw_key(stream_key const&) noexcept { return {}; }
  static device_status encode(top_k const& c, std::span<float const> g, std::span<float> e, stream_key const&,
                              scratch& ws, std::span<std::byte> payload, unsigned long long* non_finite,
                              cudaStream_t s) {
    std::size_t const n = g.size(), k = c.keep(n);
    // Without feedback top_k_select only reads x (g is the input), so the const_cast writes nothing.
    std::span<float> const x = e.empty() ? std::span<float>(const_cast<float*>(g.data()), n) : e;
    return top_k_select(e.empty() ? std::span<float const>() : g, x, k, ws.select_, indices(payload.data(), k),
                        values(payload.data(), k), non_finite, s);
  }
  static device_status add(std::span<float> sum, top_k const& c, scratch const&, std::span<std::byte const> payload,
                           cudaStream_t s) {
    std::size_t const k = c.keep(sum.size());
    auto* const at = const_cast<std::byte*>(payload.data());
    return scatter_add(sum, indices(at, k), values(at, k), s);
  }

 private:
  static std::span<std::uint32_t> indices(std::byte* at, std::size_t k) noexcept {
    return {reinterpret_cast<std::uint32_t*>(at), k};
  }
  static std::span<float> values(std::byte* at, std::size_t k) noexcept {
    return {reinterpret_cast<float*>(at + 4 * k), k};
  }
};

/// Random-k: every rank draws the same k = c.keep(n) indices from the shared key (kept in the
/// scratch), so the payload is only the values (random_k_select), added at those indices.
template <>
struct device_codec<random_k> {
  class scratch {
   public:
    scratch(std::size_t n, random_k const& c)
        : select_(n, entries(c, n)), indices_(std::max<std::size_t>(entries(c, n), 1)) {}

   private:
    friend struct device_codec<random_k>;
    random_k_workspace select_;
    device_buffer<std::uint32_t> indices_;
  };
  static std::size_t payload_bytes(random_k const& c, std::size_t n) { return 4 * entries(c, n); }
  static stream_key draw_key(stream_key const& key) noexcept { return key.shared(); }
  static device_status encode(random_k const& c, std::span<float const> g, std::span<float> e, stream_key const& key,
                              scratch& ws, std::span<std::byte> payload, unsigned long long* non_finite,
                              cudaStream_t s) {
    std::size_t const n = g.size(), k = c.keep(n);
    if (k > ws.indices_.size()) return device_status::size_mismatch;
    // Without feedback random_k_select only reads x (g is the input), so the const_cast writes nothing.
    std::span<float> const x = e.empty() ? std::span<float>(const_cast<float*>(g.data()), n) : e;
    return random_k_select(e.empty() ? std::span<float const>() : g, x, k, key.shared(),
                           random_k_element::of(n, k, c.rescale), ws.select_,
                           std::span<std::uint32_t>(ws.indices_.data(), k),
                           std::span<float>(reinterpret_cast<float*>(payload.data()), k), non_finite, s);
  }
  static device_status add(std::span<float> sum, random_k const& c, scratch const& ws,
                           std::span<std::byte const> payload, cudaStream_t s) {
    std::size_t const k = c.keep(sum.size());
    return scatter_add(sum, std::span<std::uint32_t const>(ws.indices_.data(), k),
                       std::span<float const>(reinterpret_cast<float const*>(payload.data()), k), s);
  }

 private:
  static std::size_t entries(random_k const& c, std::size_t n) {
    c.validate();
    return c.keep(n);
  }
};

/// Block top-k: the payload is kb = c.keep_blocks(n) block indices then their elements, kb * block
/// values (block_top_k_select, the last block zero-padded), added with scatter_add_blocks.
template <>
struct device_codec<block_top_k> {
  class scratch {
   public:
    scratch(std::size_t n, block_top_k const& c) : select_(n, checked_block(c)) {}

   private:
    friend struct device_codec<block_top_k>;
    static std::size_t checked_block(block_top_k const& c) {
      c.validate();
      return c.block;
    }
    block_top_k_workspace select_;
  };
  static std::size_t payload_bytes(block_top_k const& c, std::size_t n) {
    c.validate();
    return 4 * c.keep_blocks(n) * (1 + c.block);
  }
  static stream_key draw_key(stream_key const&) noexcept { return {}; }
  static device_status encode(block_top_k const& c, std::span<float const> g, std::span<float> e, stream_key const&,
                              scratch& ws, std::span<std::byte> payload, unsigned long long* non_finite,
                              cudaStream_t s) {
    std::size_t const kb = c.keep_blocks(g.size());
    bool const l2 = c.score == block_score::l2;
    if (e.empty())
      return block_top_k_select(g, c.block, l2, kb, ws.select_, blocks(payload.data(), kb),
                                values(payload.data(), kb, c.block), s);
    return block_top_k_select(g, e, c.block, l2, kb, ws.select_, blocks(payload.data(), kb),
                              values(payload.data(), kb, c.block), non_finite, s);
  }
  static device_status add(std::span<float> sum, block_top_k const& c, scratch const&,
                           std::span<std::byte const> payload, cudaStream_t s) {
    std::size_t const kb = c.keep_blocks(sum.size());
    auto* const at = const_cast<std::byte*>(payload.data());
    return scatter_add_blocks(sum, blocks(at, kb), c.block, values(at, kb, c.block), s);
  }

 private:
  static std::span<std::uint32_t> blocks(std::byte* at, std::size_t kb) noexcept {
    return {reinterpret_cast<std::uint32_t*>(at), kb};
  }
  static std::span<float> values(std::byte* at, std::size_t kb, std::size_t block) noexcept {
    return {reinterpret_cast<float*>(at + 4 * kb), kb * block};
  }
};

static_assert(DeviceCodec<maxmin_quantize> && DeviceCodec<top_k> && DeviceCodec<block_top_k> && DeviceCodec<random_k>);

}  // namespace sluice::cuda
