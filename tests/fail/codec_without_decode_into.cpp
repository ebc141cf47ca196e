// A codec writes one decode_into(msg, ctx, ws, dense, mode) for both modes; the separate
// decode / decode_add members of older codecs do not make a Codec.
// expected-error: decode_into
#include <sluice/compress/concepts.hpp>

struct two_decoders {
  using codec_concept = sluice::codec_tag;
  std::size_t max_encoded_bytes(std::size_t n) const { return n; }
  std::size_t encode(std::span<float const>, sluice::encode_context const&,
                     sluice::codec_workspace<two_decoders, float>&, std::span<std::byte>) const {
    return 0;
  }
#if defined(SLUICE_MUST_FAIL)
  void decode(std::span<std::byte const>, sluice::encode_context const&, sluice::codec_workspace<two_decoders, float>&,
              std::span<float>) const {}
  void decode_add(std::span<std::byte const>, sluice::encode_context const&,
                  sluice::codec_workspace<two_decoders, float>&, std::span<float>) const {}
#else
  template <sluice::DecodeMode M>
  void decode_into(std::span<std::byte const>, sluice::encode_context const&,
                   sluice::codec_workspace<two_decoders, float>&, std::span<float>, M) const {}
#endif
  friend bool operator==(two_decoders const&, two_decoders const&) = default;
};
static_assert(sluice::Codec<two_decoders>, "two_decoders must satisfy sluice::Codec");

int main() { return 0; }
