// zmq/rendezvous: how ranks without explicit endpoints learn each other's: rank 0 binds
// MASTER_ADDR:MASTER_PORT (torchrun's variables), collects every rank's data endpoint and sends the
// table back.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include <fmt/core.h>

#include <sluice/core/error.hpp>
#include <sluice/transport/concepts.hpp>
#include <sluice/transport/launcher.hpp>
#include <sluice/transport/zmq/options.hpp>
#include <sluice/transport/zmq/socket.hpp>

namespace sluice::detail {

/// Binds `router` (this rank's data socket) to an endpoint of `opt.scheme` and returns the endpoint
/// of every rank. `make_server(socket)` and `make_client(socket, server_rank)` add CURVE to the
/// rendezvous sockets.
template <class MakeServer, class MakeClient>
std::vector<std::string> zmq_rendezvous(zmq::context_t& ctx, zmq::socket_t& router, zmq_options const& opt, int rank,
                                        int size, deadline d, MakeServer&& make_server, MakeClient&& make_client) {
  std::string const master = opt.master_addr.empty() ? env_or("MASTER_ADDR") : opt.master_addr;
  int const port = opt.master_port > 0 ? opt.master_port : env_int("MASTER_PORT", -1, "zmq_transport");
  require(!master.empty() && port > 0 && port < 65536, errc::invalid_argument,
          "zmq_transport: rendezvous needs MASTER_ADDR and MASTER_PORT (or explicit endpoints)");
  std::string host = opt.host.empty() ? env_or("SLUICE_ZMQ_HOST", master) : opt.host;
  std::string mine;
  if (opt.scheme == "ipc") {
    mine = fmt::format("ipc://{}/sluice-{}-{}-{}", opt.ipc_dir, master, port, rank);
    router.bind(mine);
  } else {
    require(opt.scheme == "tcp", errc::invalid_argument, "zmq_transport: scheme '{}' is neither tcp nor ipc",
            opt.scheme);
    router.bind(fmt::format("tcp://{}:*", host));
    mine = router.get(zmq::sockopt::last_endpoint);
  }
  std::string const master_ep = fmt::format("tcp://{}:{}", master, port);
  std::vector<std::string> table(static_cast<std::size_t>(size));
  table[static_cast<std::size_t>(rank)] = mine;
  auto wait_in = [&](zmq::socket_t& s, char const* what) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    while (zmq::poll(&item, 1, std::chrono::milliseconds(10)) == 0)
      require(!d.expired(), errc::timeout, "zmq_transport: rank {}: rendezvous at {} timed out ({})", rank, master_ep,
              what);
  };
  auto recv_all = [](zmq::socket_t& s) {
    std::vector<zmq::message_t> parts;
    for (;;) {
      zmq::message_t m;
      (void)s.recv(m);
      bool const more = m.more();
      parts.push_back(std::move(m));
      if (!more) return parts;
    }
  };
  if (rank == 0) {
    zmq::socket_t srv(ctx, zmq::socket_type::router);
    srv.set(zmq::sockopt::linger, static_cast<int>(opt.linger.count()));
    srv.set(zmq::sockopt::maxmsgsize, zmq_control_max_bytes);
    make_server(srv);
    srv.bind(master_ep);
    std::vector<zmq::message_t> ids;
    for (int got = 1; got < size;) {
      wait_in(srv, "waiting for ranks");
      auto parts = recv_all(srv);
      if (parts.size() != 3 || parts[1].size() != 4) continue;
      auto const r = load_u32(parts[1].data());
      if (r == 0 || r >= static_cast<std::uint32_t>(size) || !table[r].empty()) continue;
      table[r] = parts[2].to_string();
      ids.push_back(std::move(parts[0]));
      ++got;
    }
    std::string joined;
    for (auto const& e : table) joined += e + '\n';
    for (auto& id : ids) {
      srv.send(id, zmq::send_flags::sndmore);
      srv.send(zmq::buffer(joined), zmq::send_flags::none);
    }
    srv.close();  // linger flushes the replies
  } else {
    zmq::socket_t cli(ctx, zmq::socket_type::dealer);
    cli.set(zmq::sockopt::linger, 0);
    cli.set(zmq::sockopt::maxmsgsize, zmq_control_max_bytes);
    make_client(cli, 0);
    cli.connect(master_ep);
    std::uint32_t const r = static_cast<std::uint32_t>(rank);
    cli.send(zmq::const_buffer(&r, 4), zmq::send_flags::sndmore);
    cli.send(zmq::buffer(mine), zmq::send_flags::none);
    wait_in(cli, "waiting for the table");
    auto parts = recv_all(cli);
    require(parts.size() == 1, errc::malformed_message, "zmq_transport: malformed rendezvous table");
    std::istringstream in(parts[0].to_string());
    for (auto& e : table) {
      std::getline(in, e);
      require(!e.empty(), errc::malformed_message, "zmq_transport: rendezvous table has an empty endpoint");
    }
  }
  return table;
}

}  // namespace sluice::detail
