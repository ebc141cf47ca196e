// The mistake: error feedback used on its own (no pipeline) with a type that is not a codec, here
// a struct holding a ratio. Its feedback_workspace is the first thing that names the codec type, and
// it refuses the type with what a codec needs.
// expected-error: sluice::feedback_workspace<C, T>: C is not a sluice::Codec on T, so no feedback policy can
// encode with it; name a codec type such as sluice::top_k (a type of your own needs `using codec_concept =
// sluice::codec_tag;`, max_encoded_bytes, encode and decode_into: see docs/compress.md)
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/residual.hpp>

struct keep_one_percent {
  double ratio = 0.01;
  friend bool operator==(keep_one_percent const&, keep_one_percent const&) = default;
};

#if defined(SLUICE_MUST_FAIL)
using codec_type = keep_one_percent;
#else
using codec_type = sluice::top_k;
#endif

int main() {
  codec_type const codec{};
  std::vector<std::size_t> const extents{16};
  sluice::residual const fb{};
  sluice::feedback_state state(fb, extents);
  sluice::feedback_workspace<codec_type, float> ws;  // error-here
  std::vector<float> g(16, 1.0f);
  std::vector<std::byte> out(1024);
  return static_cast<int>(fb.encode(codec, state.slice(0), std::span<float const>(g), sluice::encode_context{}, ws,
                                    std::span<std::byte>(out)));
}
