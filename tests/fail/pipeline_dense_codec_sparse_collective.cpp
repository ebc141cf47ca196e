// The mistake: a dense quantizer (maxmin_quantize) with by_sparse_allgather, which sums sparse
// frames; the pipeline says which collectives sum a quantizer.
// expected-error: sluice::pipeline: by_sparse_allgather sums sparse frames, but this codec is dense
// (codec_traits<C>::is_sparse is false); use by_codec or by_scatter_reduce_allgather for quantizers
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

int main() {
#if defined(SLUICE_MUST_FAIL)
  using codec = sluice::maxmin_quantize;
#else
  using codec = sluice::top_k;
#endif
  auto ts = sluice::local_transport::create(1);
  sluice::pipeline_options const options{};
  sluice::by_sparse_allgather const collective{};
  sluice::pipeline pipe{codec{}, sluice::residual{}, sluice::adam{}, ts[0], options, collective};  // error-here
  return static_cast<int>(pipe.steps());
}
