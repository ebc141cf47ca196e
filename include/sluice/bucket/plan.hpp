// bucket_plan: fuses a layout's tensors into communication buckets by a byte cap (smaller first
// bucket, as PyTorch DDP does), splits tensors into cache-sized chunks, and routes small or 1-D
// tensors around compression (CGX's rule). Every element lands in exactly one chunk.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include <sluice/bucket/layout.hpp>
#include <sluice/config.hpp>
#include <sluice/core/cache.hpp>
#include <sluice/core/error.hpp>

namespace sluice {

/// How a plan is built. A regular value: the solver changes cap_bytes between steps.
struct bucket_options {
  std::size_t cap_bytes = std::size_t{25} << 20;       ///< bytes per bucket, > 0 (DDP's 25 MiB)
  std::size_t first_cap_bytes = std::size_t{1} << 20;  ///< bytes of the first bucket of each kind, > 0 (DDP: 1 MiB)
  std::size_t chunk_bytes = 0;               ///< bytes per chunk; 0: half the per-core L2 share (cache_sizes())
  std::size_t chunk_alignment = 1024;        ///< chunk lengths are multiples of this many elements, > 0
  std::size_t bypass_below_elements = 1024;  ///< tensors with fewer elements are not compressed (CGX)
  std::size_t bypass_max_dims = 1;           ///< tensors with at most this many dimensions are not compressed (CGX)
  bool reverse = true;  ///< fill buckets from the last tensor to the first (gradients arrive in reverse, as in DDP)
  friend bool operator==(bucket_options const&, bucket_options const&) = default;
};

/// Elements [offset, offset + count) of one tensor: the unit a kernel works on in cache.
struct chunk {
  std::size_t tensor = 0;  ///< layout id
  std::size_t offset = 0;  ///< first element within the tensor
  std::size_t count = 0;   ///< elements, > 0
  friend bool operator==(chunk const&, chunk const&) = default;
};

/// A run of chunks sent as one unit; all compressed or all bypassing compression.
struct bucket {
  std::size_t id = 0;           ///< position in the plan
  std::size_t first_chunk = 0;  ///< index into bucket_plan::chunks()
  std::size_t chunk_count = 0;  ///< chunks in this bucket, > 0
  std::size_t elements = 0;     ///< sum of the chunks' counts
  std::size_t bytes = 0;        ///< sum of the chunks' gradient bytes
  bool compressed = true;       ///< false: routed around compression (small or 1-D tensors)
  friend bool operator==(bucket const&, bucket const&) = default;
};

/// The buckets and chunks of a layout under some options. Holds no training state: feedback
/// residuals and optimizer moments are kept per tensor, so rebuilding a plan at a step boundary
/// (a new cap from the solver) loses nothing.
class bucket_plan {
 public:
  bucket_plan() = default;

  /// Builds the plan. errc::invalid_argument for a zero cap, first cap or alignment.
  bucket_plan(layout const& l, bucket_options const& o = {});

  /// The same layout under new options (the solver's new cap): a new plan, same tensor ids.
  [[nodiscard]] bucket_plan rebuilt(bucket_options const& o) const;

  /// Half the L2 share of one logical CPU: a chunk of gradient plus its residual stays in L2.
  [[nodiscard]] static std::size_t default_chunk_bytes();

  [[nodiscard]] bucket_options const& options() const noexcept { return options_; }
  /// The chunk size in bytes this plan was built with (options().chunk_bytes or the detected one).
  [[nodiscard]] std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
  [[nodiscard]] std::span<bucket const> buckets() const noexcept { return buckets_; }
  [[nodiscard]] std::span<chunk const> chunks() const noexcept { return chunks_; }
  /// The chunks of bucket b, in order.
  [[nodiscard]] std::span<chunk const> chunks_of(bucket const& b) const noexcept {
    return std::span<chunk const>(chunks_).subspan(b.first_chunk, b.chunk_count);
  }
  /// Number of tensors in the layout the plan was built from.
  [[nodiscard]] std::size_t tensor_count() const noexcept { return tensors_.size(); }
  /// Whether tensor t goes through the codec (false: bypasses compression).
  [[nodiscard]] bool compressed(std::size_t t) const { return tensor(t).compressed; }
  /// Elements per chunk for tensor t: chunk_bytes / element size, a multiple of chunk_alignment.
  [[nodiscard]] std::size_t chunk_elements(std::size_t t) const { return chunk_elements_for(tensor(t).element); }

  friend bool operator==(bucket_plan const& a, bucket_plan const& b) {
    return a.options_ == b.options_ && a.chunk_bytes_ == b.chunk_bytes_ && a.buckets_ == b.buckets_ &&
           a.chunks_ == b.chunks_;
  }

 private:
  struct tensor_entry {
    std::size_t elements = 0;
    element_type element = element_type::f32;
    bool compressed = true;
    friend bool operator==(tensor_entry const&, tensor_entry const&) = default;
  };

  tensor_entry const& tensor(std::size_t t) const {
    require(t < tensors_.size(), errc::invalid_argument, "bucket_plan: tensor id {} out of range [0, {})", t,
            tensors_.size());
    return tensors_[t];
  }

  std::size_t chunk_elements_for(element_type e) const noexcept {
    std::size_t const a = options_.chunk_alignment;
    std::size_t const per = chunk_bytes_ / size_of(e);
    return std::max(a, per / a * a);
  }

  // Two open buckets, one per kind; a chunk joins its kind's open bucket unless that would pass
  // the cap, in which case the bucket closes and a new one opens. A bucket always takes at least
  // one chunk, so a chunk larger than the cap is never dropped (CGX's fusion loop drops it).
  void build();

  bucket_options options_{};
  std::size_t chunk_bytes_ = 0;
  std::vector<tensor_entry> tensors_;
  std::vector<bucket> buckets_;
  std::vector<chunk> chunks_;
};

}  // namespace sluice

template <>
struct fmt::formatter<sluice::bucket_options> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::bucket_options const& o, Ctx& ctx) const {
    return fmt::format_to(ctx.out(),
                          "bucket_options{{.cap_bytes = {}, .first_cap_bytes = {}, .chunk_bytes = {}, "
                          ".chunk_alignment = {}, .bypass_below_elements = {}, .bypass_max_dims = {}, .reverse = {}}}",
                          o.cap_bytes, o.first_cap_bytes, o.chunk_bytes, o.chunk_alignment, o.bypass_below_elements,
                          o.bypass_max_dims, o.reverse);
  }
};

#if SLUICE_HEADER_ONLY
#include <sluice/bucket/impl/plan.ipp>
#endif
