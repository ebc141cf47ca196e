// The mistake: a warm-up schedule applied to sluice::sign. Warm-up ramps the strength a codec
// declares (codec_strength); sign, identity and cast have none, and the error names the codecs
// that do.
// expected-error: sluice::warmup::apply: this codec declares no strength (`static constexpr
// sluice::codec_strength<C, V> strength`), so a warm-up cannot ramp it; warm up top_k, block_top_k, random_k,
// threshold_top_k, maxmin_quantize, qsgd or power_sgd, or leave warmup::steps at 0 for identity, cast and sign
#include <sluice/compress/sign.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/warmup.hpp>

int main() {
#if defined(SLUICE_MUST_FAIL)
  sluice::sign const codec{};
#else
  sluice::top_k const codec{.ratio = 0.01};
#endif
  sluice::warmup const w{.steps = 100};
  return w.apply(codec, 0) == codec ? 1 : 0;  // error-here
}
