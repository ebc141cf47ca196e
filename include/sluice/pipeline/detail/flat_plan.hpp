// Where each tensor's elements sit in the pipeline's flat buffers (gradients, master weights):
// buckets in plan order, each a contiguous range; a tensor may be split over buckets. Policy-
// independent, so it is compiled once for every pipeline type.
#pragma once

#include <algorithm>
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
#include <sluice/config.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>

namespace sluice::detail::pipeline {

/// attach()'s parameter spans against the layout: one fp32 span of the tensor's size per tensor.
SLUICE_DECL void check_parameters(layout const& l, std::span<std::span<float> const> params);

/// A gradient handed in for tensor `tensor` of size `n` in step `step`: a tensor of the layout, of
/// its size, not handed in yet (`reported`).
SLUICE_DECL void check_gradient(layout const& l, std::size_t tensor, std::size_t n,
                                std::span<std::uint8_t const> reported, std::uint64_t step);

/// step() ends step `step`: every tensor's gradient (`reported`, `count` of them) must be in.
SLUICE_DECL void check_complete(layout const& l, std::span<std::uint8_t const> reported, std::size_t count,
                                std::uint64_t step);

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
  explicit flat_plan(layout const& l, bucket_plan const& plan);

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
  /// Copies blocks `blocks` (of `block` elements each, counted from bucket b's first element; a
  /// block past the bucket's end is cut there) of a flat buffer into the tensors' memory.
  void scatter_blocks(std::size_t b, std::span<float const> flat, std::span<std::span<float> const> dst,
                      std::span<std::uint32_t const> blocks, std::size_t block) const noexcept {
    auto const& pieces = bucket_pieces_[b];
    auto const& r = buckets_[b];
    for (std::uint32_t const j : blocks) {
      std::size_t lo = r.first + std::size_t{j} * block;
      std::size_t const hi = std::min(lo + block, r.first + r.elements);
      if (lo >= hi) continue;
      // The last piece that starts at or before lo holds it (the pieces tile the bucket in order).
      auto it = std::upper_bound(pieces.begin(), pieces.end(), lo,
                                 [](std::size_t x, auto const& e) { return x < e.second.flat; });
      for (--it; lo < hi; ++it) {
        auto const& p = it->second;
        std::size_t const end = std::min(hi, p.flat + p.count);
        std::memcpy(dst[it->first].data() + p.offset + (lo - p.flat), flat.data() + lo, (end - lo) * sizeof(float));
        lo = end;
      }
    }
  }
  /// Tensor i's range of a flat buffer when its elements sit there contiguously and in order;
  /// empty otherwise (and for an empty tensor).
  [[nodiscard]] std::span<float> contiguous(std::size_t i, std::span<float> flat) const noexcept {
    auto const& ps = placements_[i];
    if (ps.empty()) return {};
    for (std::size_t k = 1; k < ps.size(); ++k)
      if (ps[k].flat != ps[k - 1].flat + ps[k - 1].count || ps[k].offset != ps[k - 1].offset + ps[k - 1].count)
        return {};
    if (ps.front().offset != 0) return {};
    std::size_t n = 0;
    for (auto const& p : ps) n += p.count;
    return flat.subspan(ps.front().flat, n);
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
  [[nodiscard]] std::string bucket_name(layout const& l, std::size_t b) const;

 private:
  std::vector<std::vector<placement>> placements_;
  std::vector<std::vector<std::pair<std::size_t, placement>>> bucket_pieces_;  // (tensor, placement) per bucket
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> tensor_buckets_;
  std::vector<bucket_range> buckets_;
  std::size_t size_ = 0;
};

}  // namespace sluice::detail::pipeline

#if SLUICE_HEADER_ONLY
#include <sluice/pipeline/impl/flat_plan.ipp>
#endif
