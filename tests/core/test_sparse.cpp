// sparse_view invariants and sparse_buffer storage.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <span>
#include <vector>

#include <sluice/core/sparse.hpp>

TEST_CASE("sparse_view::validate accepts sorted in-range indices and rejects the rest") {
  std::vector<std::uint32_t> idx{1, 4, 9};
  std::vector<float> val{1, 2, 3};
  sluice::sparse_view<float const> v{idx, val, 10};
  CHECK_NOTHROW(v.validate());
  v.extent = 9;
  CHECK_THROWS_WITH_AS(v.validate("w"), doctest::Contains("out of range"), sluice::error);
  v.extent = 10;
  idx = {1, 1, 2};
  v.indices = idx;
  CHECK_THROWS_WITH_AS(v.validate("w"), doctest::Contains("not strictly increasing"), sluice::error);
  idx = {3, 2, 5};
  CHECK_THROWS_AS(v.validate(), sluice::error);
  v.values = std::span<float const>(val).first(2);
  try {
    v.validate();
  } catch (sluice::error const& e) {
    CHECK(e.code() == sluice::errc::size_mismatch);
  }
}

TEST_CASE("block sparse views cover partial last blocks") {
  // extent 10, blocks of 4: blocks 0,1,2 where block 2 holds elements 8,9 and two padding slots.
  std::vector<std::uint32_t> idx{0, 2};
  std::vector<float> val{1, 2, 3, 4, 5, 6, 99, 99};
  sluice::sparse_view<float const> v{idx, val, 10, 4};
  CHECK(v.block_count() == 3);
  CHECK_NOTHROW(v.validate());
  std::vector<float> dense(10, 0.5f);
  sluice::scatter(v, std::span<float>(dense), true);
  CHECK(dense[0] == 1.5f);
  CHECK(dense[3] == 4.5f);
  CHECK(dense[4] == 0.5f);
  CHECK(dense[8] == 5.5f);
  CHECK(dense[9] == 6.5f);
  sluice::scatter(v, std::span<float>(dense), false);
  CHECK(dense[9] == 6.0f);
  CHECK(dense[5] == 0.5f);
}

TEST_CASE("sparse_buffer keeps capacity across resets") {
  sluice::sparse_buffer<float> b(100);
  b.resize(10);
  auto const* before = b.values().data();
  b.reset(50);
  CHECK(b.nnz() == 0);
  b.resize(8);
  CHECK(b.values().data() == before);
  CHECK(b.view().extent == 50);
  sluice::sparse_buffer<float, std::uint64_t> wide(1ull << 40, 16);
  wide.resize(2);
  CHECK(wide.values().size() == 32);
  CHECK_THROWS_AS(sluice::sparse_buffer<float>(10, 0), sluice::error);
}

namespace {

// Sorted unique block indices, each kept with probability p, and random values for them.
struct random_sparse {
  std::vector<std::uint32_t> idx;
  std::vector<float> val;
  random_sparse(std::size_t blocks, std::size_t block, double p, std::uint32_t seed) {
    std::uint32_t x = seed;
    auto next = [&] { return x = x * 1664525u + 1013904223u; };
    for (std::size_t i = 0; i < blocks; ++i)
      if (static_cast<double>(next() >> 8) < p * double(1u << 24)) idx.push_back(static_cast<std::uint32_t>(i));
    for (std::size_t k = 0; k < idx.size() * block; ++k) val.push_back(static_cast<float>(next() >> 8) - 8e6f);
  }
};

}  // namespace

TEST_CASE("scatter over more entries than it prefetches ahead equals the element-wise definition") {
  for (std::size_t const block : {std::size_t{1}, std::size_t{4}}) {
    std::size_t const extent = 40'001;  // a partial last block of 1 element at block 4
    std::size_t const blocks = (extent + block - 1) / block;
    random_sparse const s(blocks, block, 0.2, 11u + static_cast<std::uint32_t>(block));
    REQUIRE(s.idx.size() > 4 * sluice::detail::scatter_ahead);
    sluice::sparse_view<float const> v{s.idx, s.val, extent, block};
    CHECK_NOTHROW(v.validate());
    std::vector<float> dense(extent), want(extent);
    for (std::size_t i = 0; i < extent; ++i) dense[i] = want[i] = 0.25f * static_cast<float>(i % 7);
    sluice::scatter(v, std::span<float>(dense), true);
    for (std::size_t j = 0; j < s.idx.size(); ++j)
      for (std::size_t e = 0; e < block && s.idx[j] * block + e < extent; ++e)
        want[s.idx[j] * block + e] += s.val[j * block + e];
    CHECK(dense == want);
    sluice::scatter(v, std::span<float>(dense), false);
    for (std::size_t j = 0; j < s.idx.size(); ++j)
      for (std::size_t e = 0; e < block && s.idx[j] * block + e < extent; ++e)
        want[s.idx[j] * block + e] = s.val[j * block + e];
    CHECK(dense == want);
  }
}

TEST_CASE("densify writes a block range as zero-fill then scatter would, and nothing outside it") {
  // Both paths (in place, and tiles built in a scratch and streamed out), blocks of 1, 3 and 5
  // elements (the latter two straddle the 16 KiB tiles), and a dense span starting 0, 1 or 7
  // floats past a line boundary (the streamed path writes a head up to the first boundary in place).
  for (std::size_t const block : {std::size_t{1}, std::size_t{3}, std::size_t{5}}) {
    for (std::size_t const stream_bytes : {std::size_t{0}, SIZE_MAX}) {
      for (std::size_t const shift : {std::size_t{0}, std::size_t{1}, std::size_t{7}}) {
        CAPTURE(block);
        CAPTURE(stream_bytes);
        CAPTURE(shift);
        std::size_t const extent = 50'003;  // a partial last block for blocks of 3 and 5
        std::size_t const blocks = (extent + block - 1) / block;
        random_sparse const s(blocks, block, 0.05, 5u + static_cast<std::uint32_t>(block));
        // Four ranges that tile the blocks (one of them empty), as the reduce-scatter's owners do;
        // each range densified from its own slice of the entries.
        std::size_t const cuts[] = {0, blocks / 5, blocks / 2, blocks / 2, blocks};
        std::vector<float> storage(extent + 16, -1.0f), want(extent, 0.0f);
        auto const base = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(storage.data()) % 64 / 4);
        std::span<float> dense(storage.data() + (16 - base + shift) % 16, extent);
        for (std::size_t j = 0; j < s.idx.size(); ++j)
          for (std::size_t e = 0; e < block && s.idx[j] * block + e < extent; ++e)
            want[s.idx[j] * block + e] = s.val[j * block + e];
        for (std::size_t r = 0; r + 1 < std::size(cuts); ++r) {
          auto const lo = std::lower_bound(s.idx.begin(), s.idx.end(), cuts[r]) - s.idx.begin();
          auto const hi = std::lower_bound(s.idx.begin(), s.idx.end(), cuts[r + 1]) - s.idx.begin();
          auto const k = static_cast<std::size_t>(lo), m = static_cast<std::size_t>(hi - lo);
          sluice::sparse_view<float const> part{std::span(s.idx).subspan(k, m),
                                                std::span(s.val).subspan(k * block, m * block), extent, block};
          std::vector<float> const before(dense.begin(), dense.end());
          sluice::detail::densify(part, dense, cuts[r], cuts[r + 1], stream_bytes);
          std::size_t const first = cuts[r] * block, last = std::min(cuts[r + 1] * block, extent);
          for (std::size_t i = 0; i < extent; ++i) {
            if (i >= first && i < last) continue;
            REQUIRE(dense[i] == before[i]);  // untouched outside the range
          }
        }
        CHECK(std::equal(dense.begin(), dense.end(), want.begin(), want.end()));
      }
    }
  }
}

TEST_CASE("densify streams ranges from densify_stream_bytes up, with the same result") {
  std::size_t const extent = sluice::detail::densify_stream_bytes / sizeof(double) + 1001;
  random_sparse const s(extent, 1, 0.01, 77u);
  std::vector<double> val(s.val.begin(), s.val.end()), dense(extent, -1.0), want(extent, 0.0);
  sluice::sparse_view<double const> v{s.idx, val, extent};
  for (std::size_t j = 0; j < s.idx.size(); ++j) want[s.idx[j]] = val[j];
  sluice::densify(v, std::span<double>(dense), 0, extent);
  CHECK(dense == want);
  // Out of order inside a streamed tile: rejected, as on the in-place path.
  std::vector<std::uint32_t> idx(s.idx);
  std::swap(idx[idx.size() / 2], idx[idx.size() / 2 + 1]);
  sluice::sparse_view<double const> bad{idx, val, extent};
  CHECK_THROWS_WITH_AS(sluice::densify(bad, std::span<double>(dense), 0, extent), doctest::Contains("not past"),
                       sluice::error);
}

TEST_CASE("densify rejects entries outside its range or out of order") {
  std::vector<std::uint32_t> idx{2, 5};
  std::vector<float> val{1, 2};
  std::vector<float> dense(10, 7.0f);
  sluice::sparse_view<float const> v{idx, val, 10};
  CHECK_THROWS_WITH_AS(sluice::densify(v, std::span<float>(dense), 3, 10), doctest::Contains("outside"), sluice::error);
  CHECK_THROWS_WITH_AS(sluice::densify(v, std::span<float>(dense), 0, 5), doctest::Contains("outside"), sluice::error);
  CHECK_THROWS_AS(sluice::densify(v, std::span<float>(dense), 6, 4), sluice::error);
  CHECK_THROWS_AS(sluice::densify(v, std::span<float>(dense).first(9), 0, 10), sluice::error);
  idx = {4, 3, 5};
  val = {1, 2, 3};
  sluice::sparse_view<float const> bad{idx, val, 10};
  CHECK_THROWS_WITH_AS(sluice::densify(bad, std::span<float>(dense), 0, 10), doctest::Contains("not past"),
                       sluice::error);
  idx = {0, 3};  // block 3 of size 4 starts past an extent of 10
  val = std::vector<float>(8, 1.0f);
  sluice::sparse_view<float const> past{idx, val, 10, 4};
  CHECK_THROWS_WITH_AS(sluice::densify(past, std::span<float>(dense), 0, 4), doctest::Contains("past the extent"),
                       sluice::error);
  sluice::sparse_view<float const> none{std::span<std::uint32_t const>{}, std::span<float const>{}, 10};
  dense.assign(10, 7.0f);
  sluice::densify(none, std::span<float>(dense), 2, 4);
  CHECK(dense == std::vector<float>{7, 7, 0, 0, 7, 7, 7, 7, 7, 7});
}

TEST_CASE("sparse_buffer::resize zeroes what it adds; resize_for_overwrite only sizes") {
  sluice::sparse_buffer<float> b(100, 2);
  b.resize(10);
  std::fill(b.values().begin(), b.values().end(), 5.0f);
  std::fill(b.indices().begin(), b.indices().end(), 7u);
  b.resize(2);
  b.resize(10);  // storage already holds 5s and 7s: the new entries must still read as zero
  CHECK(b.values()[3] == 5.0f);
  CHECK(std::all_of(b.values().begin() + 4, b.values().end(), [](float v) { return v == 0.0f; }));
  CHECK(std::all_of(b.indices().begin() + 2, b.indices().end(), [](std::uint32_t i) { return i == 0; }));
  auto const* before = b.values().data();
  b.resize(1);
  b.resize_for_overwrite(8);
  CHECK(b.nnz() == 8);
  CHECK(b.values().size() == 16);
  CHECK(b.values().data() == before);
  CHECK(b.values()[0] == 5.0f);  // kept entries are kept
}
