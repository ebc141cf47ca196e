// The bodies of sluice/pipeline/detail/flat_plan.hpp: header-only, included at its end; with sluice::kernels, compiled
// there once.
#pragma once

#include <sluice/pipeline/detail/flat_plan.hpp>

namespace sluice::detail::pipeline {

SLUICE_DECL void check_parameters(layout const& l, std::span<std::span<float> const> params) {
  require(params.size() == l.size(), errc::size_mismatch, "pipeline: {} parameter spans for a layout of {} tensors",
          params.size(), l.size());
  for (std::size_t i = 0; i < l.size(); ++i) {
    require(l[i].element == element_type::f32, errc::unsupported,
            "pipeline: tensor '{}' is {}; the pipeline steps fp32 parameters and gradients", l[i].name,
            to_string(l[i].element));
    require(params[i].size() == l[i].elements(), errc::size_mismatch,
            "pipeline: tensor '{}' has {} elements in the layout but {} in its parameter span", l[i].name,
            l[i].elements(), params[i].size());
  }
}

SLUICE_DECL void check_gradient(layout const& l, std::size_t tensor, std::size_t n,
                                std::span<std::uint8_t const> reported, std::uint64_t step) {
  require(tensor < l.size(), errc::invalid_argument, "pipeline: tensor id {} outside the layout's {} tensors", tensor,
          l.size());
  require(n == l[tensor].elements(), errc::size_mismatch,
          "pipeline: gradient of tensor '{}' has {} elements, the layout says {}", l[tensor].name, n,
          l[tensor].elements());
  require(!reported[tensor], errc::invalid_argument, "pipeline: gradient of tensor '{}' handed in twice in step {}",
          l[tensor].name, step);
}

SLUICE_DECL void check_complete(layout const& l, std::span<std::uint8_t const> reported, std::size_t count,
                                std::uint64_t step) {
  if (count == l.size()) return;
  std::size_t first = 0;
  while (first < reported.size() && reported[first]) ++first;
  throw_error(errc::invalid_argument, "pipeline: step {} ended with {} of {} gradients handed in (first missing: '{}')",
              step, count, l.size(), first < l.size() ? l[first].name : std::string());
}

SLUICE_DECL flat_plan::flat_plan(layout const& l, bucket_plan const& plan) {
  placements_.assign(l.size(), {});
  tensor_buckets_.assign(l.size(), {});
  std::size_t flat = 0;
  for (auto const& b : plan.buckets()) {
    buckets_.push_back({b.id, flat, b.elements, b.chunk_count, b.compressed});
    auto& pieces = bucket_pieces_.emplace_back();
    for (auto const& c : plan.chunks_of(b)) {
      placements_[c.tensor].push_back({c.offset, flat, c.count});
      pieces.push_back({c.tensor, {c.offset, flat, c.count}});
      auto& tb = tensor_buckets_[c.tensor];
      if (tb.empty() || tb.back().first != b.id)
        tb.push_back({b.id, 1});
      else
        ++tb.back().second;
      flat += c.count;
    }
  }
  size_ = flat;
}

SLUICE_DECL std::string flat_plan::bucket_name(layout const& l, std::size_t b) const {
  auto const& r = buckets_[b];
  std::vector<std::size_t> tensors;
  for (std::size_t i = 0; i < placements_.size(); ++i)
    for (auto const& p : placements_[i])
      if (p.flat >= r.first && p.flat < r.first + r.elements) {
        tensors.push_back(i);
        break;
      }
  if (tensors.empty()) return fmt::format("bucket {}", r.id);
  std::string s = l[tensors[0]].name;
  if (tensors.size() == 2) s += " + " + l[tensors[1]].name;
  if (tensors.size() > 2) s += fmt::format(" + {} more", tensors.size() - 1);
  return s;
}

}  // namespace sluice::detail::pipeline
