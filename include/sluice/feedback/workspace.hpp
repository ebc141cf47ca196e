// feedback_workspace: the codec's workspace plus the scratch a feedback needs (compensated
// values, decoded values, the sent positions). Caller-owned, one per (tensor, thread), sized on
// first use and reused: no allocation in the steady state.
#pragma once

#include <vector>

#include <sluice/compress/concepts.hpp>
#include <sluice/core/sparse.hpp>

namespace sluice {

/// Scratch for feedback policy encode calls with codec C on elements T. Holds no state that
/// outlives a call except the codec's own workspace (PowerSGD's warm start lives there).
template <class C, class T>
struct feedback_workspace {
  codec_workspace<C, T> codec{};     ///< passed to the codec's encode and decode
  std::vector<float> compensated{};  ///< fp32 compensated gradient (unfused and bf16 paths)
  std::vector<float> momentum{};     ///< fp32 new momentum (momentum_correction)
  std::vector<T> input{};            ///< compensated gradient rounded to T when T is not float
  std::vector<T> decoded{};          ///< the decoded message (unfused paths)
  sparse_buffer<T> sparse{};         ///< the sent positions and values (sparse codecs)
};

}  // namespace sluice
