// The mistake: the warm-up schedule passed where the pipeline takes error feedback (the schedule
// belongs to the feedback's state). The pipeline names the feedback policies it takes.
// expected-error: sluice::pipeline: the second argument is not error feedback for this codec: pass
// sluice::no_feedback{}, sluice::residual{}, sluice::momentum_correction{} or sluice::ef21{}
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/feedback/warmup.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

int main() {
#if defined(SLUICE_MUST_FAIL)
  using feedback = sluice::warmup;
#else
  using feedback = sluice::residual;
#endif
  auto ts = sluice::local_transport::create(1);
  sluice::pipeline pipe{sluice::top_k{}, feedback{}, sluice::sgd{}, ts[0]};  // error-here
  return static_cast<int>(pipe.steps());
}
