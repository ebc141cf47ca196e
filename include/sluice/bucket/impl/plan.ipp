// The bodies of bucket/plan.hpp: header-only, included at its end; with sluice::kernels, compiled
// there once.
#pragma once

#include <algorithm>

#include <sluice/bucket/plan.hpp>
#include <sluice/core/cache.hpp>

namespace sluice {

SLUICE_DECL bucket_plan::bucket_plan(layout const& l, bucket_options const& o) : options_(o) {
  require(o.cap_bytes > 0, errc::invalid_argument, "bucket_plan: cap_bytes must be > 0");
  require(o.first_cap_bytes > 0, errc::invalid_argument, "bucket_plan: first_cap_bytes must be > 0");
  require(o.chunk_alignment > 0, errc::invalid_argument, "bucket_plan: chunk_alignment must be > 0");
  chunk_bytes_ = o.chunk_bytes != 0 ? o.chunk_bytes : default_chunk_bytes();
  tensors_.resize(l.size());
  for (std::size_t i = 0; i < l.size(); ++i) {
    auto const& t = l[i];
    tensors_[i].elements = t.elements();
    tensors_[i].element = t.element;
    tensors_[i].compressed = !(t.dims() <= o.bypass_max_dims || t.elements() < o.bypass_below_elements);
  }
  build();
}

SLUICE_DECL bucket_plan bucket_plan::rebuilt(bucket_options const& o) const {
  bucket_plan p;
  p.options_ = o;
  require(o.cap_bytes > 0 && o.first_cap_bytes > 0 && o.chunk_alignment > 0, errc::invalid_argument,
          "bucket_plan: cap_bytes, first_cap_bytes and chunk_alignment must be > 0");
  p.chunk_bytes_ = o.chunk_bytes != 0 ? o.chunk_bytes : default_chunk_bytes();
  p.tensors_ = tensors_;
  p.build();
  return p;
}

SLUICE_DECL std::size_t bucket_plan::default_chunk_bytes() {
  return std::max<std::size_t>(cache_sizes().l2_per_core() / 2, 4096);
}

SLUICE_DECL void bucket_plan::build() {
  struct open_bucket {
    std::vector<chunk> chunks;
    std::size_t bytes = 0, elements = 0;
    bool any_closed = false;
  };
  // Chunks are appended bucket by bucket; buckets close in order, so collect per bucket first.
  std::vector<std::pair<bucket, std::vector<chunk>>> closed;
  open_bucket open[2];  // [0]: bypass, [1]: compressed
  auto close = [&](int kind) {
    auto& ob = open[kind];
    if (ob.chunks.empty()) return;
    closed.push_back({bucket{.id = closed.size(),
                             .chunk_count = ob.chunks.size(),
                             .elements = ob.elements,
                             .bytes = ob.bytes,
                             .compressed = kind == 1},
                      std::move(ob.chunks)});
    ob.chunks.clear();
    ob.bytes = ob.elements = 0;
    ob.any_closed = true;
  };
  std::size_t const n = tensors_.size();
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t const t = options_.reverse ? n - 1 - k : k;
    auto const& te = tensors_[t];
    int const kind = te.compressed ? 1 : 0;
    std::size_t const ce = chunk_elements_for(te.element), es = size_of(te.element);
    for (std::size_t off = 0; off < te.elements; off += ce) {
      std::size_t const count = std::min(ce, te.elements - off);
      auto& ob = open[kind];
      std::size_t const cap = ob.any_closed ? options_.cap_bytes : options_.first_cap_bytes;
      if (!ob.chunks.empty() && ob.bytes + count * es > cap) close(kind);
      ob.chunks.push_back({t, off, count});
      ob.bytes += count * es;
      ob.elements += count;
    }
  }
  close(1);
  close(0);
  buckets_.clear();
  chunks_.clear();
  for (auto& [b, cs] : closed) {
    b.first_chunk = chunks_.size();
    chunks_.insert(chunks_.end(), cs.begin(), cs.end());
    buckets_.push_back(b);
  }
}

}  // namespace sluice
