// Warm-up ramps the strength a codec declares (codec_strength); a codec without one (sign,
// identity, cast) cannot be warmed up, and the error names the missing concept at this call.
// expected-error: WarmableCodec
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
  return w.apply(codec, 0) == codec ? 1 : 0;
}
