// sluice::step writes a shadow only as sluice::bfloat16 or sluice::half: a float shadow must not compile.
// expected-error: ShadowElement
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
  sluice::step(o, s, p, g, std::span(shadow));
  return static_cast<int>(s.step()) - 1;
}
