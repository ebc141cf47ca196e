// The README's example, kept compiling and correct.
#include <doctest/doctest.h>

#include <sluice/sluice.hpp>

TEST_CASE("README example: frame a sparse gradient and validate it") {
  std::vector<std::uint32_t> idx{3, 70, 900};
  std::vector<sluice::half> val{sluice::half(0.5f), sluice::half(-1.f), sluice::half(2.f)};
  std::vector<std::byte> buf(sluice::wire::frame_bytes({sluice::wire::max_index_bytes(3, 1000), 3 * 2}));
  sluice::wire::writer w(buf, {.codec = sluice::wire::codec_id::sparse,
                               .element = sluice::element_type::f16,
                               .tensor = 7,
                               .step = 42,
                               .extent = 1000});
  w.commit(sluice::wire::encode_sorted_indices<std::uint32_t>(idx, w.next()));
  sluice::wire::write_array<sluice::half>(w, val);
  std::size_t const n = w.finish();

  auto const f = sluice::wire::parse(std::span(buf).first(n), {.tensor = 7, .step = 42});
  CHECK(f.head.extent == 1000);
  CHECK(f.section_count == 2);
  CHECK_THROWS_AS((void)sluice::wire::parse(std::span(buf).first(n), {.step = 41}), sluice::error);
}
