// zmq/options: how a zmq_transport finds its peers (explicit endpoints or torchrun's variables),
// its CurveZMQ key files, heartbeat and size limits; values only, printable with fmt.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sluice {

/// CurveZMQ keys, as Z85 text files (40 characters, as zmq_curve_keypair writes them).
struct zmq_curve_options {
  std::string public_key_file{};       ///< this rank's public key
  std::string secret_key_file{};       ///< this rank's secret key (keep it mode 0600)
  std::string authorized_keys_file{};  ///< public keys of all ranks, line r = rank r; no one else is admitted
  friend bool operator==(zmq_curve_options const&, zmq_curve_options const&) = default;
};

/// How a zmq_transport finds its peers. Empty/negative fields are read from the environment.
struct zmq_options {
  std::vector<std::string> endpoints{};  ///< explicit: the endpoint each rank binds (tcp://ip:port, ipc://path)
  int rank = -1;                         ///< -1: RANK
  int world_size = -1;                   ///< -1: WORLD_SIZE (or endpoints.size())
  std::string master_addr{};             ///< rendezvous host; empty: MASTER_ADDR
  int master_port = 0;                   ///< rendezvous port; 0: MASTER_PORT
  std::string scheme = "tcp";            ///< data endpoints chosen at rendezvous: "tcp" or "ipc"
  std::string host{};                    ///< address advertised for tcp; empty: SLUICE_ZMQ_HOST, else MASTER_ADDR
  std::string ipc_dir = "/tmp";          ///< directory of ipc endpoints
  std::chrono::milliseconds connect_timeout{30'000};    ///< rendezvous + first barrier
  std::chrono::milliseconds heartbeat_interval{2'000};  ///< ZMTP PING interval
  std::chrono::milliseconds heartbeat_timeout{30'000};  ///< no traffic this long after a PING: disconnect
  /// A send to a peer is errc::peer_lost once this rank's connection to it has been down this long;
  /// a recv from it only once, in addition, the peer's connection to this rank (which carries its
  /// messages) has closed, everything it carried has been read, and this long has passed.
  std::chrono::milliseconds peer_lost_grace{200};
  std::chrono::milliseconds linger{5'000};      ///< flush time for queued sends at destruction
  bool curve = false;                           ///< encrypt and authenticate with CurveZMQ
  zmq_curve_options keys{};                     ///< used when curve is true
  std::size_t zero_copy_min_bytes = 64 * 1024;  ///< larger messages are sent without a copy (see request)
  /// The largest message a rank sends or accepts: an authenticated peer's larger message is
  /// dropped (counted in dropped_messages()) when its first frame declares its size, before any
  /// memory is set aside for it; a larger send is errc::invalid_argument. Set it to the largest
  /// message the job produces (docs/transport.md); 0: no limit. What an unauthenticated peer can
  /// make a rank hold is bounded by max_frame_bytes instead.
  std::size_t max_message_bytes = std::size_t{256} << 20;
  /// Messages travel in frames of at most this many bytes (a larger message is sent as several
  /// frames and put together by the receiver, which checks the whole against max_message_bytes
  /// before it sets memory aside for it), and the ROUTER refuses larger frames (ZMQ_MAXMSGSIZE).
  /// ZeroMQ sets aside the size a frame declares before the frame arrives, and a connection's
  /// first frames are read before its CURVE handshake ends, so this bounds what a peer that has
  /// not authenticated can make a rank hold, per connection. In [4 KiB, 64 MiB].
  std::size_t max_frame_bytes = std::size_t{1} << 20;
  /// Messages ZeroMQ queues per incoming connection before it stops reading that socket
  /// (ZMQ_RCVHWM); the transport moves them to its own per-tag queues whenever it is called, so
  /// this bounds what a peer can park in ZeroMQ, not what a collective may have in flight.
  int receive_queue_messages = 64;
  friend bool operator==(zmq_options const&, zmq_options const&) = default;
};

}  // namespace sluice

template <>
struct fmt::formatter<sluice::zmq_options> : fmt::formatter<std::string_view> {
  auto format(sluice::zmq_options const& o, format_context& ctx) const {
    return fmt::format_to(
        ctx.out(),
        "zmq_options{{.endpoints = [{}], .rank = {}, .world_size = {}, .master = {}:{}, .scheme = {}, .curve = {}}}",
        fmt::join(o.endpoints, ", "), o.rank, o.world_size, o.master_addr, o.master_port, o.scheme, o.curve);
  }
};
