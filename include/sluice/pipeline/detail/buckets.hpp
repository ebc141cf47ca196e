// A pipeline's buckets: each bucket's place in the flat buffers, its exchange strategy (the
// codec's for compressed buckets, the dense sum for the others), its sum and its optimizer state,
// sized once at attach.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <sluice/bucket/layout.hpp>
#include <sluice/feedback/workspace.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/pipeline/detail/flat_plan.hpp>
#include <sluice/pipeline/exchange.hpp>

namespace sluice::detail::pipeline {

/// One bucket of a pipeline aggregating with `Collective`.
template <class C, class O, class Collective>
struct bucket {
  std::size_t first = 0, elements = 0, chunks = 0;
  bool compressed = true;
  optimizer_state<O> ostate;
  feedback_workspace<C, float> fws{};
  exchange_for<C, Collective> cx{};         // compressed buckets
  bypass_exchange_for<C, Collective> dx{};  // the others
  bucket_sum sum{};
  explicit bucket(optimizer_state<O> s) : ostate(std::move(s)) {}
};

/// What attach() sizes from the plan: the buckets, and each one's feedback extent and name and
/// dense bytes (the telemetry's reference).
template <class Bucket>
struct bucket_set {
  std::vector<Bucket> buckets{};
  std::vector<std::size_t> extents{}, dense_bytes{};
  std::vector<std::string> names{};
};

/// Sizes every bucket of `flat`: compressed ones (unless every bucket is summed densely) through
/// the codec's exchange, with a sparse sum when `sparse_sum`.
template <class Bucket, class O>
bucket_set<Bucket> make_buckets(flat_plan const& flat, layout const& l, O const& opt, int world, int rank,
                                int group_size, bool gather_frames, bool all_dense, bool sparse_sum,
                                std::size_t block) {
  bucket_set<Bucket> set;
  for (std::size_t b = 0; b < flat.buckets().size(); ++b) {
    auto const& r = flat.buckets()[b];
    Bucket bk(optimizer_state<O>(opt, r.elements, static_cast<std::uint32_t>(r.id)));
    bk.first = r.first;
    bk.elements = r.elements;
    bk.chunks = r.chunks;
    bk.compressed = r.compressed && !all_dense;
    bucket_info const info{.id = r.id,
                           .elements = r.elements,
                           .world = world,
                           .rank = rank,
                           .group_size = group_size,
                           .gather_frames = gather_frames};
    if (bk.compressed)
      bk.cx.size(info);
    else
      bk.dx.size(info);
    bk.sum.size(r.elements, bk.compressed && sparse_sum, block);
    set.extents.push_back(r.elements);
    set.dense_bytes.push_back(r.elements * sizeof(float));
    set.names.push_back(flat.bucket_name(l, b));
    set.buckets.push_back(std::move(bk));
  }
  return set;
}

}  // namespace sluice::detail::pipeline
