// The mistake: a ratio (0.01) where the pipeline takes a codec value (sluice::top_k{.ratio = 0.01}).
// expected-error: sluice::pipeline: the first argument is not a sluice::Codec: pass a codec value such as
// sluice::top_k{.ratio = 0.01} (a type of your own needs `using codec_concept = sluice::codec_tag;`, max_encoded_bytes,
// encode and decode_into: see docs/compress.md)
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

int main() {
  auto ts = sluice::local_transport::create(1);
#if defined(SLUICE_MUST_FAIL)
  double codec = 0.01;
#else
  sluice::top_k codec{.ratio = 0.01};
#endif
  sluice::pipeline pipe{codec, sluice::residual{}, sluice::sgd{}, ts[0]};  // error-here
  return static_cast<int>(pipe.steps());
}
