// bucket_plan: every element of every tensor in exactly one chunk for random layouts, byte caps
// with a smaller first bucket, cache-sized aligned chunks, and CGX's small/1-D bypass rule.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include <sluice/bucket/plan.hpp>

namespace {

sluice::layout random_layout(std::mt19937& rng) {
  sluice::layout l;
  std::uniform_int_distribution<int> tensors(0, 12), dims(0, 4), dim(0, 40), big(0, 5);
  int const n = tensors(rng);
  for (int i = 0; i < n; ++i) {
    std::vector<std::size_t> shape(static_cast<std::size_t>(dims(rng)));
    for (auto& d : shape) d = static_cast<std::size_t>(dim(rng));
    if (big(rng) == 0) shape = {static_cast<std::size_t>(dim(rng) * 1000 + 1), 7};  // larger than small caps
    auto const et = static_cast<sluice::element_type>(1 + i % 3);
    l.add(fmt::format("t{}", i), shape, et);
  }
  return l;
}

// Marks every (tensor, element) the plan covers; each must be hit exactly once.
void check_exact_cover(sluice::layout const& l, sluice::bucket_plan const& p) {
  std::vector<std::vector<unsigned char>> hits(l.size());
  for (std::size_t t = 0; t < l.size(); ++t) hits[t].assign(l[t].elements(), 0);
  std::size_t chunk_seen = 0;
  for (auto const& b : p.buckets()) {
    REQUIRE(b.chunk_count > 0);
    REQUIRE(b.first_chunk == chunk_seen);
    chunk_seen += b.chunk_count;
    std::size_t elements = 0, bytes = 0;
    for (auto const& c : p.chunks_of(b)) {
      REQUIRE(c.tensor < l.size());
      REQUIRE(c.count > 0);
      REQUIRE(c.offset + c.count <= l[c.tensor].elements());
      REQUIRE(p.compressed(c.tensor) == b.compressed);
      for (std::size_t i = c.offset; i < c.offset + c.count; ++i) ++hits[c.tensor][i];
      elements += c.count;
      bytes += c.count * sluice::size_of(l[c.tensor].element);
    }
    CHECK(elements == b.elements);
    CHECK(bytes == b.bytes);
  }
  CHECK(chunk_seen == p.chunks().size());
  std::size_t wrong = 0;
  for (std::size_t t = 0; t < l.size(); ++t)
    for (unsigned char h : hits[t]) wrong += h != 1;
  REQUIRE(wrong == 0);
}

}  // namespace

TEST_CASE("bucket_plan: exact cover for random layouts and options") {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<std::size_t> cap(1, 64 << 10), chunk(1, 32 << 10), align(1, 300);
  for (int trial = 0; trial < 300; ++trial) {
    auto const l = random_layout(rng);
    sluice::bucket_options o{.cap_bytes = cap(rng),
                             .first_cap_bytes = cap(rng),
                             .chunk_bytes = chunk(rng),
                             .chunk_alignment = align(rng),
                             .bypass_below_elements = trial % 2 ? 1024u : 0u,
                             .bypass_max_dims = trial % 3 == 0 ? 0u : 1u,
                             .reverse = trial % 2 == 0};
    sluice::bucket_plan const p(l, o);
    check_exact_cover(l, p);
    // A rebuild at a step boundary covers the same elements.
    auto o2 = o;
    o2.cap_bytes = cap(rng);
    check_exact_cover(l, p.rebuilt(o2));
    CHECK(p.rebuilt(o) == p);
  }
}

TEST_CASE("bucket_plan: caps, first bucket, alignment and order") {
  sluice::layout l;
  for (int i = 0; i < 8; ++i) l.add(fmt::format("w{}", i), {64, 64});  // 16 KiB each
  sluice::bucket_plan const p(
      l, {.cap_bytes = 48 << 10, .first_cap_bytes = 16 << 10, .chunk_bytes = 1 << 20, .reverse = true});
  auto const b = p.buckets();
  REQUIRE(b.size() == 4);  // 16 KiB first, then 48, 48, 16
  CHECK(b[0].bytes == 16u << 10);
  CHECK(b[1].bytes == 48u << 10);
  CHECK(b[3].bytes == 16u << 10);
  CHECK(p.chunks()[0].tensor == 7);  // reverse order: last tensor first
  sluice::bucket_plan const fwd(l, {.cap_bytes = 48 << 10, .first_cap_bytes = 16 << 10, .reverse = false});
  CHECK(fwd.chunks()[0].tensor == 0);

  // A tensor larger than the cap is split into aligned chunks across buckets, never dropped.
  sluice::layout big;
  big.add("emb", {1000, 100});  // 400 000 bytes
  sluice::bucket_plan const pb(
      big, {.cap_bytes = 64 << 10, .first_cap_bytes = 64 << 10, .chunk_bytes = 40000, .chunk_alignment = 1024});
  CHECK(pb.chunk_elements(0) == 9216);  // 10000 floats rounded down to a multiple of 1024
  for (auto const& c : pb.chunks().first(pb.chunks().size() - 1)) CHECK(c.count % 1024 == 0);
  check_exact_cover(big, pb);
  for (auto const& bk : pb.buckets()) CHECK(bk.bytes <= (64u << 10));

  // The default chunk size comes from the detected per-core L2 share.
  sluice::bucket_plan const pd(big);
  CHECK(pd.chunk_bytes() == sluice::bucket_plan::default_chunk_bytes());
  CHECK(pd.chunk_bytes() >= 4096);
}

TEST_CASE("bucket_plan: CGX bypass rule by default, configurable") {
  sluice::layout l;
  l.add("w", {32, 32}).add("bias", {4096}).add("tiny", {10, 10}).add("ln", {8});
  sluice::bucket_plan const p(l);
  CHECK(p.compressed(0));
  CHECK_FALSE(p.compressed(1));  // 1-D
  CHECK_FALSE(p.compressed(2));  // fewer than 1024 elements
  CHECK_FALSE(p.compressed(3));
  for (auto const& b : p.buckets())
    for (auto const& c : p.chunks_of(b)) CHECK(b.compressed == p.compressed(c.tensor));
  sluice::bucket_plan const all(l, {.bypass_below_elements = 0, .bypass_max_dims = 0});
  for (std::size_t t = 0; t < l.size(); ++t) CHECK(all.compressed(t));
  CHECK_THROWS_AS(sluice::bucket_plan(l, {.cap_bytes = 0}), sluice::error);
  CHECK_THROWS_AS(sluice::bucket_plan(l, {.chunk_alignment = 0}), sluice::error);
  CHECK(fmt::format("{}", sluice::bucket_options{}).find("cap_bytes = 26214400") != std::string::npos);
}
