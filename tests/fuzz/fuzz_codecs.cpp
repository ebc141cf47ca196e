// libFuzzer target: the decoders (decode, decode_add, decode_sparse) of one codec configuration
// per execution, chosen by the input, on arbitrary bytes and (edit mode) on edited valid frames.
// Raw inputs are tried as they are and with the frame checksum recomputed, so mutations reach each
// codec's own validation. The only acceptable failure is a sluice::error; sanitizers catch
// everything else. Input layouts:
//   edit mode (size >= 4, first byte >= 0xC0): see edited_codec below;
//   raw mode (otherwise): [frame bytes..., selector]; the selector picks one of the 17
//   configurations of one_codec and an element type (see LLVMFuzzerTestOneInput).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <type_traits>
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

// The 17 codec configurations, by index (the selector's low 5 bits modulo 17).
inline constexpr unsigned configurations = 17;

template <class T>
void one_codec(unsigned config, std::span<std::byte const> msg, std::size_t n) {
  switch (config) {
    case 0:
      return run<sluice::identity, T>({}, msg, n);
    case 1:
      return run<sluice::cast, T>({}, msg, n);
    case 2:
      return run<sluice::cast, T>({.to = sluice::element_type::bf16}, msg, n);
    case 3:
      return run<sluice::top_k, T>({}, msg, n);
    case 4:
      return run<sluice::threshold_top_k, T>({}, msg, n);
    case 5:
      return run<sluice::block_top_k, T>({}, msg, n);
    case 6:
      return run<sluice::block_top_k, T>({.block = 3}, msg, n);
    case 7:
      return run<sluice::random_k, T>({.ratio = 0.5}, msg, n);
    case 8:
      return run<sluice::random_k, T>({.ratio = 1e-6}, msg, n);
    case 9:
      return run<sluice::sign, T>({}, msg, n);
    case 10:
      return run<sluice::sign, T>({.bucket = 5}, msg, n);
    case 11:
      return run<sluice::qsgd, T>({}, msg, n);
    case 12:
      return run<sluice::qsgd, T>({.levels = 5, .bucket = 64}, msg, n);
    case 13:
      return run<sluice::maxmin_quantize, T>({}, msg, n);
    case 14:
      return run<sluice::maxmin_quantize, T>({.bits = 3, .bucket = 100}, msg, n);
    case 15:
      return run<sluice::power_sgd, T>({}, msg, n);
    default:
      return run<sluice::power_sgd, T>({.rank = 1}, msg, n);
  }
}

// SLUICE_FUZZ_SEEDS=<dir>: edit mode also writes each valid frame it encodes, before the edits,
// as a raw-mode input (frame, selector of the raw configuration of the same codec), so a corpus
// of raw frames that pass the frame reader can be seeded:
//   SLUICE_FUZZ_SEEDS=<dir> fuzz_codecs <edit-mode corpus> -runs=0
template <class T>
void write_seed(std::span<std::byte const> frame, unsigned raw_config) {
  static char const* const dir = std::getenv("SLUICE_FUZZ_SEEDS");
  if (dir == nullptr) return;
  unsigned const type = std::is_same_v<T, float> ? 0 : std::is_same_v<T, sluice::half> ? 1 : 2;
  auto const selector = static_cast<char>(raw_config | type << 5);
  std::uint64_t h = 1469598103934665603u;
  for (std::byte b : frame) h = (h ^ static_cast<std::uint8_t>(b)) * 1099511628211u;
  std::ofstream out(std::string(dir) + "/seed-" + std::to_string(h) + "-" + std::to_string(raw_config | type << 5),
                    std::ios::binary);
  out.write(reinterpret_cast<char const*>(frame.data()), static_cast<std::streamsize>(frame.size()));
  out.put(selector);
}

// Edit mode (first byte >= 0xC0): a valid frame of one codec, encoded from a tensor the input
// seeds, then edited at input-chosen offsets and resealed, so every field check behind the
// checksum is reached from a well-formed start. Input: [mode, size, seed, step, (u16 offset, byte)*].
template <class C, class T>
void edited(C const& c, std::span<std::uint8_t const> in, unsigned raw_config) {
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
  write_seed<T>(msg, raw_config);
  for (std::size_t i = 4; i + 2 < in.size(); i += 3)
    msg[(in[i] | static_cast<std::size_t>(in[i + 1]) << 8) % msg.size()] = static_cast<std::byte>(in[i + 2]);
  std::uint64_t const sum = sluice::detail::wire::frame_checksum(msg);
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
      return edited<sluice::identity, T>({}, in, 0);
    case 1:
      return edited<sluice::cast, T>({.to = sluice::element_type::bf16}, in, 2);
    case 2:
      return edited<sluice::top_k, T>({.ratio = 0.1}, in, 3);
    case 3:
      return edited<sluice::threshold_top_k, T>({}, in, 4);
    case 4:
      return edited<sluice::block_top_k, T>({.ratio = 0.2, .block = 3}, in, 6);
    case 5:
      return edited<sluice::random_k, T>({.ratio = 0.3}, in, 7);
    case 6:
      return edited<sluice::sign, T>({.bucket = 5}, in, 10);
    case 7:
      return edited<sluice::qsgd, T>({.levels = 5, .bucket = 16}, in, 12);
    case 8:
      return edited<sluice::maxmin_quantize, T>({.bits = 3, .bucket = 64}, in, 14);
    case 9:
      return edited<sluice::maxmin_quantize, T>({.bits = 8, .bucket = 64, .round = sluice::rounding::stochastic}, in,
                                                13);
    case 10:
      return edited<sluice::power_sgd, T>({.rank = 1}, in, 16);
    default:
      return edited<sluice::qsgd, T>({.levels = 127, .bucket = 7}, in, 11);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size >= 4 && data[0] >= 0xC0) {
    std::span<std::uint8_t const> const in(data, size);
    unsigned const pick = data[0] & 0x0F, type = (data[0] >> 4) & 3;
    if (type == 0) edited_codec<float>(pick, in);
    if (type == 1) edited_codec<sluice::half>(pick, in);
    if (type == 2) edited_codec<sluice::bfloat16>(pick, in);
    if (type == 3) edited_codec<float>(pick + 1, in);
    return 0;
  }
  // Raw mode: the last byte selects one (configuration, element type); the bytes before it are
  // the frame. Selector s: configuration (s & 0x1F) % 17 (the order of one_codec), element type
  // (s >> 5) % 3 (0 float, 1 half, 2 bfloat16). Every pair is reachable, and since the frame does
  // not depend on the selector, a frame of one codec or configuration decoded by another (the
  // mismatched path: another codec id, or the same id with other parameters or element type) is
  // one mutation of the last byte away.
  if (size == 0) return 0;
  unsigned const selector = data[size - 1];
  unsigned const config = (selector & 0x1Fu) % configurations, type = (selector >> 5) % 3;
  std::size_t const frame = size - 1;
  std::vector<std::byte> msg(frame);
  if (frame != 0) std::memcpy(msg.data(), data, frame);
  // Decode into a tensor of the frame's extent (bounded) so the extent check passes.
  std::size_t n = 64;
  if (frame >= 40) {
    std::uint64_t extent;
    std::memcpy(&extent, msg.data() + 32, 8);
    n = extent <= (std::size_t{1} << 16) ? static_cast<std::size_t>(extent) : 64;
  }
  for (int sealed = 0; sealed < 2; ++sealed) {
    if (sealed == 1) {
      if (frame < sluice::wire::header_bytes) break;
      std::uint64_t const sum = sluice::detail::wire::frame_checksum(msg);
      std::memcpy(msg.data() + 72, &sum, 8);
    }
    if (type == 0) one_codec<float>(config, msg, n);
    if (type == 1) one_codec<sluice::half>(config, msg, n);
    if (type == 2) one_codec<sluice::bfloat16>(config, msg, n);
  }
  return 0;
}
