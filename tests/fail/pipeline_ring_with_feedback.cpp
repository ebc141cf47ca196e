// The mistake: the dense ring (by_ring_allreduce) with error feedback (residual): the ring sends
// gradients exactly, so the feedback has nothing to compensate.
// expected-error: sluice::pipeline: by_ring_allreduce sends the gradient exactly, so error feedback has nothing to
// compensate; use sluice::no_feedback{} (or a compressing codec with by_codec)
#include <sluice/compress/identity.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

int main() {
#if defined(SLUICE_MUST_FAIL)
  using feedback = sluice::residual;
#else
  using feedback = sluice::no_feedback;
#endif
  auto ts = sluice::local_transport::create(1);
  sluice::pipeline_options const options{};
  sluice::by_ring_allreduce const collective{};
  sluice::pipeline pipe{sluice::identity{}, feedback{}, sluice::sgd{}, ts[0], options, collective};  // error-here
  return static_cast<int>(pipe.steps());
}
