// zmq: the Transport over ZeroMQ (target sluice::zmq), for links between clusters as StellaTrain
// uses them. Each rank binds one ROUTER and connects one DEALER per peer; rendezvous from torchrun's
// variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or explicit endpoints; TCP or IPC; ZMTP
// heartbeats and socket monitors turn a vanished peer into errc::peer_lost; optional CurveZMQ
// encryption with a ZAP handler that admits only the public keys listed in a key file.
#pragma once

#include <sluice/transport/zmq/curve.hpp>
#include <sluice/transport/zmq/options.hpp>
#include <sluice/transport/zmq/transport.hpp>
