// zmq/socket: settings and framing shared by the rendezvous and the transport's sockets: ZMTP
// heartbeats, the size cap of control sockets, and the 4-byte rank and tag frames.
#pragma once

#include <cstdint>
#include <cstring>

#include <zmq.hpp>

#include <sluice/transport/zmq/options.hpp>

namespace sluice::detail {

inline void set_heartbeats(zmq::socket_t& s, zmq_options const& o) {
  s.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(o.heartbeat_interval.count()));
  s.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(o.heartbeat_timeout.count()));
  s.set(zmq::sockopt::heartbeat_ttl, static_cast<int>(o.heartbeat_timeout.count()));
}

/// ZMQ_MAXMSGSIZE of sockets that carry only control traffic (DEALERs, rendezvous).
inline constexpr std::int64_t zmq_control_max_bytes = std::int64_t{1} << 20;

inline std::uint32_t load_u32(void const* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace sluice::detail
