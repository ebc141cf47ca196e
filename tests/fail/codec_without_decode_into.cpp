// The mistake: a codec of one's own written against the older interface, with separate decode and
// decode_add members instead of one decode_into(msg, ctx, ws, dense, mode) for both modes, handed
// to a pipeline. It opts in as a codec but does not model sluice::Codec, and the pipeline says
// which members it needs.
// expected-error: sluice::pipeline: the first argument declares codec_concept but does not model sluice::Codec:
// give it max_encoded_bytes(n), encode(grad, ctx, ws, out) and one template decode_into(msg, ctx, ws, dense, mode)
// for both decode modes (not separate decode and decode_add members), and make it a regular value
// (default-constructible, copyable, ==): see docs/compress.md
#include <sluice/compress/identity.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

// Sends every value, as sluice::identity does (it delegates to it).
struct my_codec {
  using codec_concept = sluice::codec_tag;
  template <class T>
  using workspace = sluice::codec_workspace<sluice::identity, T>;
  std::size_t max_encoded_bytes(std::size_t n) const { return sluice::identity{}.max_encoded_bytes(n); }
  template <sluice::Element T>
  std::size_t encode(std::span<T const> in, sluice::encode_context const& ctx, workspace<T>& ws,
                     std::span<std::byte> out) const {
    return sluice::identity{}.encode(in, ctx, ws, out);
  }
#if defined(SLUICE_MUST_FAIL)
  template <sluice::Element T>
  void decode(std::span<std::byte const> msg, sluice::encode_context const& ctx, workspace<T>& ws,
              std::span<T> dense) const {
    sluice::identity{}.decode_into(msg, ctx, ws, dense, sluice::overwrite);
  }
  template <sluice::Element T>
  void decode_add(std::span<std::byte const> msg, sluice::encode_context const& ctx, workspace<T>& ws,
                  std::span<T> dense) const {
    sluice::identity{}.decode_into(msg, ctx, ws, dense, sluice::accumulate);
  }
#else
  template <sluice::Element T, sluice::DecodeMode M>
  void decode_into(std::span<std::byte const> msg, sluice::encode_context const& ctx, workspace<T>& ws,
                   std::span<T> dense, M mode) const {
    sluice::identity{}.decode_into(msg, ctx, ws, dense, mode);
  }
#endif
  friend bool operator==(my_codec const&, my_codec const&) = default;
  friend void hash_append(sluice::serial::hasher& h, my_codec const&) { h("my_codec"); }
};

int main() {
  auto ts = sluice::local_transport::create(1);
  sluice::pipeline pipe{my_codec{}, sluice::residual{}, sluice::sgd{}, ts[0]};  // error-here
  return static_cast<int>(pipe.steps());
}
