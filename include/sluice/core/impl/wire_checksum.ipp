// The bodies of sluice/core/wire.hpp: header-only, included at its end; with sluice::kernels, compiled there once.
#pragma once

#include <sluice/core/wire.hpp>

namespace sluice::detail::wire {

SLUICE_DECL std::uint64_t frame_checksum(std::span<std::byte const> frame, block_digest_table const* pre) noexcept {
  checksum_state s;
  s.update(frame.first(72));
  auto const payload = frame.subspan(sluice::wire::header_bytes);
  block_digest_table t(payload.size());
  if (t.blocks == 0) {
    s.update(payload);
    return s.finish();
  }
  std::array<std::uint32_t, checksum_max_blocks> todo;  // blocks left to hash
  std::size_t left = 0;
  for (std::size_t b = 0; b < t.blocks; ++b) {
    if (pre != nullptr && pre->payload == t.payload && pre->known[b] != 0)
      t.digest[b] = pre->digest[b];
    else
      todo[left++] = static_cast<std::uint32_t>(b);
  }
  parallel_chunks(left, 1, [&](std::size_t i0, std::size_t i1, int) {
    for (std::size_t i = i0; i < i1; ++i) {
      std::size_t const b = todo[i];
      checksum_state d = block_state(b);
      d.update(payload.subspan(b * t.block, std::min(t.block, payload.size() - b * t.block)));
      t.digest[b] = d.finish();
    }
  });
  s.update(std::as_bytes(std::span(t.digest.data(), t.blocks)));
  s.length += payload.size();
  return s.finish();
}

}  // namespace sluice::detail::wire
