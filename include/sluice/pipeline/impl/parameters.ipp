// The bodies of sluice/pipeline/detail/parameters.hpp: header-only, included at its end; with sluice::kernels, compiled
// there once.
#pragma once

#include <sluice/pipeline/detail/parameters.hpp>

namespace sluice::detail::pipeline {

SLUICE_DECL void published_parameters::reset(parameter_home home, layout const& l,
                                             std::span<std::span<float> const> user) {
  owned_ = home == parameter_home::pipeline;
  user_.assign(user.begin(), user.end());
  if (!owned_) {
    views_[0].assign(user.begin(), user.end());
    return;
  }
  for (std::size_t k = 0; k < 2; ++k) {
    storage_[k].assign(l.total_elements(), 0.0f);
    spans_[k].clear();
    views_[k].clear();
    std::size_t at = 0;
    for (std::size_t i = 0; i < l.size(); ++i) {
      std::span<float> const s(storage_[k].data() + at, l[i].elements());
      spans_[k].push_back(s);
      views_[k].emplace_back(s);
      at += l[i].elements();
    }
  }
  current_ = 0;
}

}  // namespace sluice::detail::pipeline
