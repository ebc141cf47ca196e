// The mistake: the dense ring (by_ring_allreduce) with a compressing codec (top_k): the ring sends
// fp32 and would silently ignore the codec, so the pipeline refuses the combination.
// expected-error: sluice::pipeline: by_ring_allreduce sends fp32 and would ignore this codec; use sluice::identity{} or
// by_codec to aggregate compressed frames
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
  sluice::pipeline_options const options{};
  sluice::by_ring_allreduce const collective{};
  sluice::pipeline pipe{codec{}, sluice::no_feedback{}, sluice::sgd{}, ts[0], options, collective};  // error-here
  return static_cast<int>(pipe.steps());
}
