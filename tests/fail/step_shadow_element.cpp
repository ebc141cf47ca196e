// The mistake: a float shadow span passed to sluice::step. The shadow is the low-precision copy of
// the parameters a GPU reads (bf16 or fp16); an fp32 one would be the parameters again.
// expected-error: sluice::step and sluice::flush: the shadow copy of the parameters is written as
// sluice::bfloat16 or sluice::half (sluice::ShadowElement), not as this type; pass a std::span<sluice::bfloat16>
// or std::span<sluice::half>, or leave the shadow argument out to keep the fp32 parameters only
#include <span>
#include <vector>

#include <sluice/optim/sgd.hpp>

#if defined(SLUICE_MUST_FAIL)
using shadow_type = float;
#else
using shadow_type = sluice::bfloat16;
#endif

int main() {
  sluice::sgd const o{};
  std::vector<float> p(4, 1.0f), g(4, 0.5f);
  std::vector<shadow_type> shadow(4);
  sluice::optimizer_state<sluice::sgd> s(o, p.size());
  sluice::step(o, s, p, g, std::span(shadow));  // error-here
  return static_cast<int>(s.step()) - 1;
}
