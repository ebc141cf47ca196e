// The mistake: a codec of one's own without hash_append. The pipeline identifies every policy by
// its value (checked across ranks at attach, stored in checkpoints), so it asks for one and shows
// how to write it.
// expected-error: sluice::pipeline: a policy has no hash_append, which identifies its value in attach checks and
// checkpoints; declare `friend void hash_append(sluice::serial::hasher& h, my_policy const& p) { h("my_policy",
// p.field, ...); }` beside its fields
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
  template <sluice::Element T, sluice::DecodeMode M>
  void decode_into(std::span<std::byte const> msg, sluice::encode_context const& ctx, workspace<T>& ws,
                   std::span<T> dense, M mode) const {
    sluice::identity{}.decode_into(msg, ctx, ws, dense, mode);
  }
  friend bool operator==(my_codec const&, my_codec const&) = default;
#if !defined(SLUICE_MUST_FAIL)
  friend void hash_append(sluice::serial::hasher& h, my_codec const&) { h("my_codec"); }
#endif
};

int main() {
  auto ts = sluice::local_transport::create(1);
  sluice::pipeline pipe{my_codec{}, sluice::residual{}, sluice::sgd{}, ts[0]};  // error-here
  return static_cast<int>(pipe.steps());
}
