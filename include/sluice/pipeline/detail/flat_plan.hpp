// Where each tensor's elements sit in the pipeline's flat buffers (gradients, master weights):
// buckets in plan order, each a contiguous range; a tensor may be split over buckets. Policy-
// independent, so it is compiled once for every pipeline type.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include <sluice/bucket/layout.hpp>
#include <sluice/bucket/plan.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>

namespace sluice::detail::pipeline {

/// attach()'s parameter spans against the layout: one fp32 span of the tensor's size per tensor.
inline void check_parameters(layout const& l, std::span<std::span<float> const> params) {
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

/// A gradient handed in for tensor `tensor` of size `n` in step `step`: a tensor of the layout, of
/// its size, not handed in yet (`reported`).
inline void check_gradient(layout const& l, std::size_t tensor, std::size_t n, std::span<std::uint8_t const> reported,
                           std::uint64_t step) {
  require(tensor < l.size(), errc::invalid_argument, "pipeline: tensor id {} outside the layout's {} tensors", tensor,
          l.size());
  require(n == l[tensor].elements(), errc::size_mismatch,
          "pipeline: gradient of tensor '{}' has {} elements, the layout says {}", l[tensor].name, n,
          l[tensor].elements());
  require(!reported[tensor], errc::invalid_argument, "pipeline: gradient of tensor '{}' handed in twice in step {}",
          l[tensor].name, step);
}

/// step() ends step `step`: every tensor's gradient (`reported`, `count` of them) must be in.
inline void check_complete(layout const& l, std::span<std::uint8_t const> reported, std::size_t count,
                           std::uint64_t step) {
  if (count == l.size()) return;
  std::size_t first = 0;
  while (first < reported.size() && reported[first]) ++first;
  throw_error(errc::invalid_argument, "pipeline: step {} ended with {} of {} gradients handed in (first missing: '{}')",
              step, count, l.size(), first < l.size() ? l[first].name : std::string());
}

/// The flat buffers' plan.
class flat_plan {
 public:
  struct placement {
    std::size_t offset = 0, flat = 0, count = 0;  ///< tensor elements [offset, offset + count) at flat[flat ...]
  };
  struct bucket_range {
    std::size_t id = 0, first = 0, elements = 0, chunks = 0;
    bool compressed = true;
  };
  /// Where a flat element comes from.
  struct origin {
    std::size_t tensor = 0, element = 0;
  };

  flat_plan() = default;
  explicit flat_plan(layout const& l, bucket_plan const& plan) {
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

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<bucket_range const> buckets() const noexcept { return buckets_; }
  /// (bucket, chunks of tensor i in it) for each bucket tensor i reaches.
  [[nodiscard]] std::span<std::pair<std::size_t, std::size_t> const> buckets_of(std::size_t i) const noexcept {
    return tensor_buckets_[i];
  }

  /// Copies tensor i's values into (gather) or out of (scatter) a flat buffer.
  void gather(std::size_t i, std::span<float const> src, std::span<float> flat) const noexcept {
    for (auto const& p : placements_[i])
      std::memcpy(flat.data() + p.flat, src.data() + p.offset, p.count * sizeof(float));
  }
  /// Copies bucket b's elements, times `weight`, out of the tensors' own memory (src[i]: tensor i)
  /// into a flat buffer; returns whether all of them are finite (checked in the same pass).
  [[nodiscard]] bool gather_bucket(std::size_t b, std::span<std::span<float const> const> src, std::span<float> flat,
                                   float weight = 1.0f) const noexcept {
    std::uint32_t bad = 0;
    for (auto const& [i, p] : bucket_pieces_[b]) {
      float const* const from = src[i].data() + p.offset;
      float* const to = flat.data() + p.flat;
      std::size_t const count = p.count;  // clang before 16 cannot capture a structured binding
      auto copy = [&](auto scale) {
        for (std::size_t k = 0; k < count; ++k) {
          float const v = scale(from[k]);
          bad |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & 0x7f800000u) == 0x7f800000u);
          to[k] = v;
        }
      };
      if (weight == 1.0f)
        copy([](float x) { return x; });
      else
        copy([weight](float x) { return x * weight; });
    }
    return bad == 0;
  }
  /// Copies bucket b's range of a flat buffer into the tensors' memory (dst[i]: tensor i).
  void scatter_bucket(std::size_t b, std::span<float const> flat,
                      std::span<std::span<float> const> dst) const noexcept {
    for (auto const& [i, p] : bucket_pieces_[b])
      std::memcpy(dst[i].data() + p.offset, flat.data() + p.flat, p.count * sizeof(float));
  }
  void scatter(std::size_t i, std::span<float const> flat, std::span<float> dst) const noexcept {
    for (auto const& p : placements_[i])
      std::memcpy(dst.data() + p.offset, flat.data() + p.flat, p.count * sizeof(float));
  }

  /// The tensor and element flat element `flat` holds.
  [[nodiscard]] origin locate(std::size_t flat) const noexcept {
    for (std::size_t i = 0; i < placements_.size(); ++i)
      for (auto const& p : placements_[i])
        if (flat >= p.flat && flat < p.flat + p.count) return {i, p.offset + (flat - p.flat)};
    return {};
  }

  /// "fc1.weight", "fc1.weight + fc1.bias" or "fc1.weight + 3 more": the tensors of bucket b.
  [[nodiscard]] std::string bucket_name(layout const& l, std::size_t b) const {
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

 private:
  std::vector<std::vector<placement>> placements_;
  std::vector<std::vector<std::pair<std::size_t, placement>>> bucket_pieces_;  // (tensor, placement) per bucket
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> tensor_buckets_;
  std::vector<bucket_range> buckets_;
  std::size_t size_ = 0;
};

}  // namespace sluice::detail::pipeline
