// The bodies of sluice/collective/detail/message.hpp: header-only, included at its end; with sluice::kernels, compiled
// there once.
#pragma once

#include <sluice/collective/detail/message.hpp>

namespace sluice::detail {

[[noreturn]] SLUICE_DECL void rethrow_with(error const& e, char const* what, collective_context const& ctx, int rank,
                                           int peer) {
  throw error(e.kind(), fmt::format("{}: tensor {} step {}: rank {} with rank {}: {}", what, ctx.tensor, ctx.step, rank,
                                    peer, e.what()));
}

SLUICE_DECL void stamp(std::vector<std::byte>& msg, message_id id) {
  std::size_t const n = msg.size();
  std::uint64_t const check = message_id_check(id, msg);
  msg.resize(n + message_id_bytes);
  std::memcpy(msg.data() + n, &id.origin, 4);
  std::memcpy(msg.data() + n + 4, &id.seq, 4);
  std::memcpy(msg.data() + n + 8, &check, 8);
}

SLUICE_DECL std::size_t write_dense_frame(std::vector<std::byte>& out, std::span<float const> values,
                                          sluice::wire::header const& h) {
  out.reserve(sluice::wire::frame_bytes({values.size() * sizeof(float)}) + message_id_bytes);
  out.resize(sluice::wire::frame_bytes({values.size() * sizeof(float)}));
  sluice::wire::writer w(out, h);
  sluice::wire::write_array(w, values);
  std::size_t const n = w.finish();
  out.resize(n);
  return n;
}

}  // namespace sluice::detail
