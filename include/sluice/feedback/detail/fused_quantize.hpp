// Fused compensate + quantize + residual update for the max-min quantizer: one pass over memory
// per bucket (read g, read e, write e, write packed bits), bit-identical to the composition.
#pragma once

#include <cstddef>
#include <span>

#include <sluice/compress/concepts.hpp>
#include <sluice/feedback/state.hpp>
#include <sluice/feedback/workspace.hpp>

namespace sluice::feedback_detail {

/// True when codec C on T has a fused residual path here.
template <class C, class T>
inline constexpr bool has_fused_quantize = false;

template <class S, class C, class T>
std::size_t residual_fused_quantize(C const&, feedback_slice const&, std::span<T const>, encode_context const&,
                                    feedback_workspace<C, T>&, std::span<std::byte>) {
  return 0;
}

}  // namespace sluice::feedback_detail
