// libFuzzer target: every codec's decoders (decode, decode_add, decode_sparse) on arbitrary bytes. Inputs are tried as
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
    c.decode(msg, ctx, ws, std::span<T>(dense));
  } catch (sluice::error const&) {
  }
  try {
    c.decode_add(msg, ctx, ws, std::span<T>(dense));
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
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
