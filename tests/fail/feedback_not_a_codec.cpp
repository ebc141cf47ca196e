// residual::encode takes a Codec: a misuse fails at the call with the concept's name, not deep
// inside the feedback kernels.
// expected-error: Codec
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/residual.hpp>

struct not_a_codec {
  double ratio = 0.01;
  friend bool operator==(not_a_codec const&, not_a_codec const&) = default;
};

int main() {
#if defined(SLUICE_MUST_FAIL)
  not_a_codec const codec{};
#else
  sluice::top_k const codec{};
#endif
  std::vector<std::size_t> const extents{16};
  sluice::residual const fb{};
  sluice::feedback_state state(fb, extents);
  sluice::feedback_workspace<sluice::top_k, float> ws;
  std::vector<float> g(16, 1.0f);
  std::vector<std::byte> out(1024);
  return static_cast<int>(fb.encode(codec, state.slice(0), std::span<float const>(g), sluice::encode_context{}, ws,
                                    std::span<std::byte>(out)));
}
