// libFuzzer target: every codec's decoders (decode, decode_add, decode_sparse) on arbitrary bytes,
// and (edit mode) on edited valid frames. Inputs are tried as
// they are and with the frame checksum recomputed, so mutations reach each codec's own validation. The only acceptable
// failure is a sluice::error; sanitizers catch everything else.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <sluice/compress/all.hpp>

namespace {

// The tensor and step the frame claims (decoders check them against the context), so mutations
// reach past that check.
sluice::encode_context context_of(std::span<std::byte const> msg) {
  sluice::encode_context ctx{.seed = 1};
  if (msg.size() >= 32) {
    std::memcpy(&ctx.tensor, msg.data() + 16, 8);
    std::memcpy(&ctx.step, msg.data() + 24, 8);
  }
  return ctx;
}

template <class C, class T>
void run(C const& c, std::span<std::byte const> msg, std::size_t n) {
  sluice::codec_workspace<C, T> ws{};
  std::vector<T> dense(n);
  sluice::encode_context const ctx = context_of(msg);
  try {
    sluice::decode(c, msg, ctx, ws, std::span<T>(dense));
  } catch (sluice::error const&) {
  }
  try {
    sluice::decode_add(c, msg, ctx, ws, std::span<T>(dense));
  } catch (sluice::error const&) {
  }
  if constexpr (sluice::SparseCodec<C, T>) {
    try {
      sluice::sparse_buffer<T> out;
      c.decode_sparse(msg, ctx, ws, out);
      out.view().validate();
    } catch (sluice::error const&) {
    }
  }
}

template <class T>
void all_codecs(std::span<std::byte const> msg, std::size_t n) {
  run<sluice::identity, T>({}, msg, n);
  run<sluice::cast, T>({}, msg, n);
  run<sluice::cast, T>({.to = sluice::element_type::bf16}, msg, n);
  run<sluice::top_k, T>({}, msg, n);
  run<sluice::threshold_top_k, T>({}, msg, n);
  run<sluice::block_top_k, T>({}, msg, n);
  run<sluice::block_top_k, T>({.block = 3}, msg, n);
  run<sluice::random_k, T>({.ratio = 0.5}, msg, n);
  run<sluice::random_k, T>({.ratio = 1e-6}, msg, n);
  run<sluice::sign, T>({}, msg, n);
  run<sluice::sign, T>({.bucket = 5}, msg, n);
  run<sluice::qsgd, T>({}, msg, n);
  run<sluice::qsgd, T>({.levels = 5, .bucket = 64}, msg, n);
  run<sluice::maxmin_quantize, T>({}, msg, n);
  run<sluice::maxmin_quantize, T>({.bits = 3, .bucket = 100}, msg, n);
  run<sluice::power_sgd, T>({}, msg, n);
  run<sluice::power_sgd, T>({.rank = 1}, msg, n);
}

// Edit mode (first byte >= 0xC0): a valid frame of one codec, encoded from a tensor the input
// seeds, then edited at input-chosen offsets and resealed, so every field check behind the
// checksum is reached from a well-formed start. Input: [mode, size, seed, step, (u16 offset, byte)*].
template <class C, class T>
void edited(C const& c, std::span<std::uint8_t const> in) {
  // Odd in[1]: a multiple of 8 (a matrix of 8 columns for power_sgd), else any small length.
  std::size_t const n =
      (in[1] & 1) != 0 ? 8 * (1 + static_cast<std::size_t>(in[1]) / 2) : 1 + 2 * static_cast<std::size_t>(in[1]);
  std::vector<T> x(n);
  std::uint32_t h = 0x9E3779B9u * (in[2] + 1u);
  for (auto& v : x) {
    h = h * 1664525u + 1013904223u;
    v = T(static_cast<float>(static_cast<std::int32_t>(h)) * 0x1p-31f * (in[2] % 7 == 0 ? 1e30f : 1.0f));
  }
  std::size_t const shape[2] = {n % 8 == 0 ? n / 8 : 1, n % 8 == 0 ? 8 : n};
  sluice::encode_context const ctx{.seed = 5, .step = in[3], .tensor = 2, .shape = shape};
  sluice::codec_workspace<C, T> ws{};
  std::vector<std::byte> msg(c.template max_encoded_bytes<T>(n));
  msg.resize(c.encode(std::span<T const>(x), ctx, ws, std::span<std::byte>(msg)));
  for (std::size_t i = 4; i + 2 < in.size(); i += 3)
    msg[(in[i] | static_cast<std::size_t>(in[i + 1]) << 8) % msg.size()] = static_cast<std::byte>(in[i + 2]);
  std::uint64_t const sum = sluice::wire::detail::frame_checksum(msg);
  std::memcpy(msg.data() + 72, &sum, 8);
  std::vector<T> dense(n);
  try {
    sluice::decode(c, msg, ctx, ws, std::span<T>(dense));
  } catch (sluice::error const& e) {
    if (e.code() != sluice::errc::malformed_message) __builtin_trap();
  }
  try {
    sluice::decode_add(c, msg, ctx, ws, std::span<T>(dense));
  } catch (sluice::error const& e) {
    if (e.code() != sluice::errc::malformed_message) __builtin_trap();
  }
  if constexpr (sluice::SparseCodec<C, T>) {
    try {
      sluice::sparse_buffer<T> out;
      c.decode_sparse(msg, ctx, ws, out);
      out.view().validate();
    } catch (sluice::error const& e) {
      if (e.code() != sluice::errc::malformed_message) __builtin_trap();
    }
  }
}

template <class T>
void edited_codec(unsigned pick, std::span<std::uint8_t const> in) {
  switch (pick % 12) {
    case 0:
      return edited<sluice::identity, T>({}, in);
    case 1:
      return edited<sluice::cast, T>({.to = sluice::element_type::bf16}, in);
    case 2:
      return edited<sluice::top_k, T>({.ratio = 0.1}, in);
    case 3:
      return edited<sluice::threshold_top_k, T>({}, in);
    case 4:
      return edited<sluice::block_top_k, T>({.ratio = 0.2, .block = 3}, in);
    case 5:
      return edited<sluice::random_k, T>({.ratio = 0.3}, in);
    case 6:
      return edited<sluice::sign, T>({.bucket = 5}, in);
    case 7:
      return edited<sluice::qsgd, T>({.levels = 5, .bucket = 16}, in);
    case 8:
      return edited<sluice::maxmin_quantize, T>({.bits = 3, .bucket = 64}, in);
    case 9:
      return edited<sluice::maxmin_quantize, T>({.bits = 8, .bucket = 64, .round = sluice::rounding::stochastic}, in);
    case 10:
      return edited<sluice::power_sgd, T>({.rank = 1}, in);
    default:
      return edited<sluice::qsgd, T>({.levels = 127, .bucket = 7}, in);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size >= 4 && data[0] >= 0xC0) {
    std::span<std::uint8_t const> const in(data, size);
    unsigned const pick = data[0] & 0x0F, type = (data[0] >> 4) & 3;
    if (type == 0) edited_codec<float>(pick, in);
    if (type == 1) edited_codec<Eigen::half>(pick, in);
    if (type == 2) edited_codec<Eigen::bfloat16>(pick, in);
    if (type == 3) edited_codec<float>(pick + 1, in);
    return 0;
  }
  std::vector<std::byte> msg(size);
  if (size != 0) std::memcpy(msg.data(), data, size);
  // Decode into a tensor of the frame's extent (bounded) so the extent check passes.
  std::size_t n = 64;
  if (size >= 40) {
    std::uint64_t extent;
    std::memcpy(&extent, msg.data() + 32, 8);
    n = extent <= (std::size_t{1} << 16) ? static_cast<std::size_t>(extent) : 64;
  }
  for (int sealed = 0; sealed < 2; ++sealed) {
    if (sealed == 1) {
      if (size < sluice::wire::header_bytes) break;
      std::uint64_t const sum = sluice::wire::detail::frame_checksum(msg);
      std::memcpy(msg.data() + 72, &sum, 8);
    }
    all_codecs<float>(msg, n);
    all_codecs<Eigen::half>(msg, n);
    all_codecs<Eigen::bfloat16>(msg, n);
  }
  return 0;
}
