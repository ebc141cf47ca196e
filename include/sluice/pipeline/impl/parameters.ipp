// The bodies of sluice/pipeline/detail/parameters.hpp: header-only, included at its end; with sluice::kernels, compiled
// there once.
#pragma once

#include <sluice/pipeline/detail/parameters.hpp>

namespace sluice::detail::pipeline {

SLUICE_DECL void published_parameters::reset(parameter_home home, layout const& l,
                                             std::span<std::span<float> const> user, std::size_t buckets) {
  owned_ = home == parameter_home::pipeline;
  holds_.assign(buckets, {none, none});
  changed_.assign(buckets, {});
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

SLUICE_DECL void published_parameters::holds_master(std::uint64_t update) noexcept {
  for (auto& h : holds_) h[update % 2] = update;
}

SLUICE_DECL void published_parameters::holds_nothing() noexcept {
  for (auto& h : holds_) h = {none, none};
  for (auto& c : changed_) c.update = none;
}

SLUICE_DECL void published_parameters::write_bucket(flat_plan const& flat, std::size_t b, std::span<float const> master,
                                                    std::uint64_t update, std::span<std::uint32_t const> blocks,
                                                    std::size_t block) {
  auto const to = buffer(update);
  auto& held = holds_[b][update % 2];
  auto& last = changed_[b];
  auto const& r = flat.buckets()[b];
  // A sparse update of at most a quarter of the bucket's blocks: copying blocks beats the pass.
  bool const sparse = !blocks.empty() && blocks.size() * block * 4 <= r.elements;
  if (sparse && update >= 2 && held == update - 2 && last.update == update - 1) {
    flat.scatter_blocks(b, master, to, last.blocks, block);
    flat.scatter_blocks(b, master, to, blocks, block);
  } else {
    flat.scatter_bucket(b, master, to);
  }
  held = update;
  last.update = sparse ? update : none;
  if (sparse) last.blocks.assign(blocks.begin(), blocks.end());
}

}  // namespace sluice::detail::pipeline
