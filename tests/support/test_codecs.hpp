// Small codecs that model the Codec concepts, so collectives are tested independently of
// compress/: an exact dense fp32 codec, an exact sparse codec (nonzeros), and a deterministic
// 8-bit bucketed quantizer (a lossy codec to prove replicas stay bit-identical).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/context.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/core/varint.hpp>
#include <sluice/core/wire.hpp>

namespace sluice::test {

/// Raw fp32 values in one section.
struct dense_codec {
  using codec_concept = codec_tag;
  friend bool operator==(dense_codec const&, dense_codec const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, dense_codec const&) { h("dense_codec"); }

  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const { return wire::frame_bytes({n * 4}); }
  template <class WS>
  std::size_t encode(std::span<float const> in, encode_context const& ctx, WS&, std::span<std::byte> out) const {
    wire::writer w(out, {.codec = wire::codec_id::identity,
                         .element = element_type::f32,
                         .flags = 0,
                         .tensor = ctx.tensor,
                         .step = ctx.step,
                         .extent = in.size()});
    wire::write_array(w, in);
    return w.finish();
  }
  template <class WS, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const&, WS&, std::span<float> dense, M) const {
    auto f = wire::parse(msg, {.codec = wire::codec_id::identity, .extent = dense.size(), .sections = 1});
    if constexpr (!M::accumulates) {
      wire::read_array(f.section(0), dense, "dense_codec values");
    } else {
      auto s = f.section(0);
      require(s.size() == dense.size() * 4, errc::malformed_message, "dense_codec: values section size");
      for (std::size_t i = 0; i < dense.size(); ++i) dense[i] += detail::wire::load<float>(s.data() + 4 * i);
    }
  }
};
static_assert(Codec<dense_codec>);

/// Every nonzero element, exactly: varint indices + fp32 values.
struct sparse_codec {
  using codec_concept = codec_tag;
  static constexpr bool is_sparse = true;
  friend bool operator==(sparse_codec const&, sparse_codec const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, sparse_codec const&) { h("sparse_codec"); }
  template <class T>
  struct workspace {
    std::vector<std::uint32_t> idx;
    std::vector<float> val;
    sparse_buffer<float> sparse;
  };

  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const {
    return wire::frame_bytes({wire::max_index_bytes(n, n), n * 4});
  }
  std::size_t encode(std::span<float const> in, encode_context const& ctx, workspace<float>& ws,
                     std::span<std::byte> out) const {
    ws.idx.clear();
    ws.val.clear();
    for (std::size_t i = 0; i < in.size(); ++i)
      if (in[i] != 0.0f) ws.idx.push_back(static_cast<std::uint32_t>(i)), ws.val.push_back(in[i]);
    wire::writer w(out, {.codec = wire::codec_id::sparse,
                         .element = element_type::f32,
                         .flags = 0,
                         .tensor = ctx.tensor,
                         .step = ctx.step,
                         .extent = in.size()});
    w.commit(wire::encode_sorted_indices(std::span<std::uint32_t const>(ws.idx), w.next()));
    wire::write_array(w, std::span<float const>(ws.val));
    return w.finish();
  }
  void decode_sparse(std::span<std::byte const> msg, encode_context const&, workspace<float>&,
                     sparse_buffer<float>& out) const {
    auto f = wire::parse(msg, {.codec = wire::codec_id::sparse, .sections = 2});
    auto vals = f.section(1);
    require(vals.size() % 4 == 0, errc::malformed_message, "sparse_codec: values section size {}", vals.size());
    std::size_t const nnz = vals.size() / 4;
    out.reset(f.head.extent, 1);
    out.resize(nnz);
    wire::decode_sorted_indices(f.section(0), f.head.extent, out.indices());
    wire::read_array(vals, out.values(), "sparse_codec values");
  }
  template <DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<float>& ws,
                   std::span<float> dense, M) const {
    decode_sparse(msg, ctx, ws, ws.sparse);
    require(ws.sparse.extent() == dense.size(), errc::malformed_message, "sparse_codec: extent");
    if constexpr (!M::accumulates) std::fill(dense.begin(), dense.end(), 0.0f);
    scatter(std::as_const(ws.sparse).view(), dense, M::accumulates);
  }
};
static_assert(SparseCodec<sparse_codec>);

/// Deterministic bucketed 8-bit quantizer: per 64-element bucket a fp32 scale (max |x|) and int8 codes.
struct quant_codec {
  using codec_concept = codec_tag;
  static constexpr bool is_quantizer = true;
  static constexpr std::size_t bucket = 64;
  friend bool operator==(quant_codec const&, quant_codec const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, quant_codec const&) { h("quant_codec"); }

  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const {
    return wire::frame_bytes({(n + bucket - 1) / bucket * 4, n});
  }
  template <class WS>
  std::size_t encode(std::span<float const> in, encode_context const& ctx, WS&, std::span<std::byte> out) const {
    std::size_t const n = in.size(), nb = (n + bucket - 1) / bucket;
    wire::writer w(out, {.codec = wire::codec_id::maxmin_quantize,
                         .element = element_type::f32,
                         .flags = 0,
                         .tensor = ctx.tensor,
                         .step = ctx.step,
                         .extent = n});
    auto sc = w.next();
    require(sc.size() >= nb * 4 + n, errc::size_mismatch, "quant_codec: output too small");
    for (std::size_t b = 0; b < nb; ++b) {
      float m = 0;
      for (std::size_t i = b * bucket; i < std::min(n, (b + 1) * bucket); ++i) m = std::max(m, std::fabs(in[i]));
      detail::wire::store<float>(sc.data() + 4 * b, m);
    }
    w.commit(nb * 4);
    auto q = w.next();
    for (std::size_t i = 0; i < n; ++i) {
      float const m = detail::wire::load<float>(sc.data() + 4 * (i / bucket));
      float const v = m == 0 ? 0.0f : std::nearbyint(in[i] / m * 127.0f);
      q[i] = static_cast<std::byte>(static_cast<std::int8_t>(v));
    }
    w.commit(n);
    return w.finish();
  }
  template <class WS, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const&, WS&, std::span<float> dense, M) const {
    if constexpr (!M::accumulates) std::fill(dense.begin(), dense.end(), 0.0f);
    std::size_t const n = dense.size(), nb = (n + bucket - 1) / bucket;
    auto f = wire::parse(msg, {.codec = wire::codec_id::maxmin_quantize, .extent = n, .sections = 2});
    auto sc = f.section(0), q = f.section(1);
    require(sc.size() == nb * 4 && q.size() == n, errc::malformed_message, "quant_codec: section sizes");
    for (std::size_t i = 0; i < n; ++i) {
      float const m = detail::wire::load<float>(sc.data() + 4 * (i / bucket));
      dense[i] += static_cast<float>(static_cast<std::int8_t>(q[i])) * m / 127.0f;
    }
  }
};
static_assert(Codec<quant_codec>);

}  // namespace sluice::test
