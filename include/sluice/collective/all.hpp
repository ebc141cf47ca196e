// Every collective over any Transport and Codec (engine-free; engines live in transport/mpi.hpp and transport/zmq.hpp).
#pragma once

#include <sluice/collective/concepts.hpp>
#include <sluice/collective/hierarchical.hpp>
#include <sluice/collective/parameter_server.hpp>
#include <sluice/collective/replica_check.hpp>
#include <sluice/collective/ring_allreduce.hpp>
#include <sluice/collective/scatter_reduce_allgather.hpp>
#include <sluice/collective/sparse_allgather.hpp>
#include <sluice/collective/sparse_reduce_scatter.hpp>
