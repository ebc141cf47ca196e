// Umbrella header for sluice::sluice: everything that needs no optional engine (MPI, ZeroMQ and
// CUDA headers come with sluice::mpi, sluice::zmq and sluice::cuda).
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/config.hpp>
#include <sluice/error.hpp>
#include <sluice/version.hpp>

#include <sluice/core/cache.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/core/varint.hpp>
#include <sluice/core/wire.hpp>

#include <sluice/bucket/all.hpp>
#include <sluice/collective/all.hpp>
#include <sluice/compress/all.hpp>
#include <sluice/feedback/all.hpp>
#include <sluice/optim/all.hpp>
#include <sluice/transport/all.hpp>
