// sparse_view invariants and sparse_buffer storage.
#include <doctest/doctest.h>

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
