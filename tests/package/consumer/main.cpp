// Consumer smoke program: frames a sparse tensor, parses it back, checks it, prints a line.
#include <cstdio>
#include <vector>

#include <sluice/sluice.hpp>

int main() {
  std::vector<std::uint32_t> idx{3, 70, 900};
  std::vector<std::byte> out(sluice::wire::frame_bytes({sluice::wire::max_index_bytes(idx.size(), 1000)}));
  sluice::wire::writer w(out, {.codec = sluice::wire::codec_id::sparse, .extent = 1000});
  w.commit(sluice::wire::encode_sorted_indices<std::uint32_t>(idx, w.next()));
  std::size_t const n = w.finish();
  auto const f = sluice::wire::parse(std::span<std::byte const>(out.data(), n));
  std::vector<std::uint32_t> back(idx.size());
  sluice::wire::decode_sorted_indices<std::uint32_t>(f.section(0), f.head.extent, std::span<std::uint32_t>(back));
  bool const ok =
      back == idx && sluice::random_stream({.seed = 1}).word(0) == sluice::random_stream({.seed = 1}).word(0);
  std::printf("sluice %s consumer: %s (%zu-byte frame)\n", sluice::version_string, ok ? "ok" : "FAILED", n);
  return ok ? 0 : 1;
}
