// The dense ring would silently ignore a compressing codec: the pipeline refuses the combination.
// expected-error: by_ring_allreduce sends fp32 and would ignore this codec
#include <sluice/compress/identity.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

int main() {
#if defined(SLUICE_MUST_FAIL)
  using codec = sluice::top_k;
#else
  using codec = sluice::identity;
#endif
  auto ts = sluice::local_transport::create(1);
  sluice::pipeline pipe{codec{}, sluice::no_feedback{},      sluice::sgd{},
                        ts[0],   sluice::pipeline_options{}, sluice::by_ring_allreduce{}};
  return static_cast<int>(pipe.steps());
}
