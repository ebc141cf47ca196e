// The dense ring sends gradients exactly: error feedback with it is a mistake the pipeline names.
// expected-error: error feedback has nothing to compensate
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
  sluice::pipeline pipe{sluice::identity{},         feedback{}, sluice::sgd{}, ts[0], sluice::pipeline_options{},
                        sluice::by_ring_allreduce{}};
  return static_cast<int>(pipe.steps());
}
