// A type without the codec opt-in tag is not a Codec, even with the right member functions.
// expected-error: codec_concept
#include <sluice/compress/concepts.hpp>

struct almost_codec {
#if !defined(SLUICE_MUST_FAIL)
  using codec_concept = sluice::codec_tag;
#endif
  std::size_t max_encoded_bytes(std::size_t n) const { return n; }
  std::size_t encode(std::span<float const>, sluice::encode_context const&,
                     sluice::codec_workspace<almost_codec, float>&, std::span<std::byte>) const {
    return 0;
  }
  template <sluice::DecodeMode M>
  void decode_into(std::span<std::byte const>, sluice::encode_context const&,
                   sluice::codec_workspace<almost_codec, float>&, std::span<float>, M) const {}
  friend bool operator==(almost_codec const&, almost_codec const&) = default;
};
static_assert(sluice::Codec<almost_codec>, "almost_codec must satisfy sluice::Codec");

int main() { return 0; }
