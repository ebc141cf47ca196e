// A dense quantizer cannot be summed by the sparse allgather: the pipeline says so and what to use.
// expected-error: by_sparse_allgather sums sparse frames, but this codec is dense
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
  sluice::pipeline pipe{codec{}, sluice::residual{},         sluice::adam{},
                        ts[0],   sluice::pipeline_options{}, sluice::by_sparse_allgather{}};
  return static_cast<int>(pipe.steps());
}
