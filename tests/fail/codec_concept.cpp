// The mistake: a codec of one's own with every member a codec needs but without the opt-in tag
// (`using codec_concept = sluice::codec_tag;`), handed to a pipeline. A type is a Codec only when
// it opts in, so the pipeline refuses it and names the tag to add.
// expected-error: sluice::pipeline: the first argument is not a sluice::Codec: pass a codec value such as
// sluice::top_k{.ratio = 0.01} (a type of your own needs `using codec_concept = sluice::codec_tag;`,
// max_encoded_bytes, encode and decode_into: see docs/compress.md)
#include <sluice/compress/identity.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

// Sends every value, as sluice::identity does (it delegates to it).
struct my_codec {
#if !defined(SLUICE_MUST_FAIL)
  using codec_concept = sluice::codec_tag;
#endif
  template <class T>
  using workspace = sluice::codec_workspace<sluice::identity, T>;
  std::size_t max_encoded_bytes(std::size_t n) const { return sluice::identity{}.max_encoded_bytes(n); }
  template <sluice::Element T>
  std::size_t encode(std::span<T const> in, sluice::encode_context const& ctx, workspace<T>& ws,
                     std::span<std::byte> out) const {
    return sluice::identity{}.encode(in, ctx, ws, out);
  }
  template <sluice::Element T, sluice::DecodeMode M>
  void decode_into(std::span<std::byte const> msg, sluice::encode_context const& ctx, workspace<T>& ws,
                   std::span<T> dense, M mode) const {
    sluice::identity{}.decode_into(msg, ctx, ws, dense, mode);
  }
  friend bool operator==(my_codec const&, my_codec const&) = default;
  friend void hash_append(sluice::serial::hasher& h, my_codec const&) { h("my_codec"); }
};

int main() {
  auto ts = sluice::local_transport::create(1);
  sluice::pipeline pipe{my_codec{}, sluice::residual{}, sluice::sgd{}, ts[0]};  // error-here
  return static_cast<int>(pipe.steps());
}
