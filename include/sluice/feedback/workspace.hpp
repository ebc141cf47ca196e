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
  static_assert(Codec<C, T>,
                "sluice::feedback_workspace<C, T>: C is not a sluice::Codec on T, so no feedback policy can encode "
                "with it; name a codec type such as sluice::top_k (a type of your own needs `using codec_concept = "
                "sluice::codec_tag;`, max_encoded_bytes, encode and decode_into: see docs/compress.md)");
  codec_workspace<C, T> codec{};     ///< passed to the codec's encode and decode
  std::vector<float> compensated{};  ///< fp32 compensated gradient (unfused and bf16 paths)
  std::vector<float> momentum{};     ///< fp32 new momentum (momentum_correction)
  std::vector<T> input{};            ///< compensated gradient rounded to T when T is not float
  std::vector<T> decoded{};          ///< the decoded message (unfused paths)
  sparse_buffer<T> sparse{};         ///< the sent positions and values (sparse codecs)
};

}  // namespace sluice
