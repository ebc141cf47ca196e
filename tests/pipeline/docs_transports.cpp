// How README.md and docs/pipeline.md hand each engine's transport to the pipeline, compiled and run
// (tests/docs/test_docs.cpp keeps the pages equal to the regions below, as it does docs/transport.md's
// ZeroMQ and MPI blocks): a local_transport endpoint is moved in (examples/data_parallel_step.cpp);
// zmq_transport and mpi_transport cannot move and are passed as lvalues, which the pipeline refers
// to. Built once per engine (DOCS_TRANSPORT_ZMQ: run under scripts/sluice-run -n 3;
// DOCS_TRANSPORT_MPI: under mpirun -np 3): a few steps of a least-squares toy, then check_replicas
// (under MPI, once more with by_mpi_allreduce). Exit status 0 when every rank holds the same
// parameters and the loss fell.
#include <cstdio>
#include <span>
#include <vector>

#include <sluice/collective/replica_check.hpp>
#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>
#if DOCS_TRANSPORT_ZMQ
#include <sluice/transport/zmq.hpp>
#elif DOCS_TRANSPORT_MPI
#include <sluice/transport/mpi.hpp>
#else
#error "define DOCS_TRANSPORT_ZMQ or DOCS_TRANSPORT_MPI"
#endif

namespace {

constexpr std::size_t rows_w = 64, cols_w = 64, dim = rows_w * cols_w;

/// Gradient of 1/2 |w - target(rank)|^2 (each rank pulls towards its own target), and the loss.
double gradient(int rank, std::span<float const> w, std::span<float> g) {
  double loss = 0;
  for (std::size_t j = 0; j < dim; ++j) {
    float const target = static_cast<float>((j * 7 + static_cast<std::size_t>(rank)) % 13) * 0.1f;
    g[j] = w[j] - target;
    loss += 0.5 * static_cast<double>(g[j]) * static_cast<double>(g[j]);
  }
  return loss;
}

/// A few steps through `pipe`; then check_replicas over `check`, a second transport of the same
/// world (the pipeline's exchange thread owns the first). 0 when the replicas agree and the loss fell.
template <class Pipeline, class Transport>
int train(Pipeline& pipe, int rank, Transport& check, int steps) {
  sluice::layout model;
  model.add("w", {rows_w, cols_w});
  std::vector<float> w(dim, 0.0f), grad(dim);
  std::vector<std::span<float>> const params{w};
  std::vector<std::span<float const>> const grads{grad};
  double first = 0, last = 0;
  pipe.attach(model, params);
  for (int step = 0; step < steps; ++step) {
    last = gradient(rank, w, grad);
    if (step == 0) first = last;
    pipe.step(grads);
  }
  pipe.synchronize();
  sluice::replica_report const r = sluice::check_replicas(check, params, {.step = static_cast<std::uint64_t>(steps)});
  std::printf("rank %d: loss %.3f -> %.3f; %s\n", rank, first, last, r.describe().c_str());
  return r.agree && last < first ? 0 : 1;
}

#if DOCS_TRANSPORT_ZMQ
int run(int, char**) {
  // example-begin zmq
  // example-begin zmq-transport
  sluice::zmq_transport transport;  // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: sluice-run -n 4 -- ./trainer
  // example-end zmq-transport
  sluice::pipeline pipe{sluice::top_k{.ratio = 0.01}, sluice::residual{}, sluice::sgd{.lr = 0.05},
                        transport,  // an lvalue: the pipeline refers to it (it cannot move); it outlives pipe
                        sluice::pipeline_options{.staleness = 1, .seed = 1}};
  // example-end zmq
  sluice::zmq_transport check(
      sluice::zmq_options{.master_port = sluice::detail::env_int("MASTER_PORT", 0, "test") + 1});
  return train(pipe, transport.rank(), check, 30);
}
#else
/// docs/pipeline.md's dense baseline through MPI_Allreduce, after the sparse run (MPI initialized).
int dense_mpi_allreduce(sluice::mpi_transport& check) {
  // example-begin mpi-allreduce
  sluice::mpi_transport t;  // a duplicate of MPI_COMM_WORLD (t.comm())
  sluice::pipeline pipe{sluice::identity{},
                        sluice::no_feedback{},
                        sluice::adam{.lr = 1e-3},
                        t,
                        sluice::pipeline_options{.staleness = 1},
                        sluice::by_mpi_allreduce{}};
  // example-end mpi-allreduce
  return train(pipe, t.rank(), check, 30);
}

int run(int argc, char** argv) {
  // example-begin mpi
  // example-begin mpi-transport
  sluice::mpi_environment env(&argc, &argv);  // mpirun -np 4 ./trainer; asks for MPI_THREAD_MULTIPLE
  sluice::mpi_transport transport;            // a duplicate of MPI_COMM_WORLD
  // example-end mpi-transport
  sluice::pipeline pipe{sluice::top_k{.ratio = 0.01}, sluice::residual{}, sluice::sgd{.lr = 0.05},
                        transport,  // an lvalue: the pipeline refers to it (it cannot move); it outlives pipe
                        sluice::pipeline_options{.staleness = 1, .seed = 1}};
  // example-end mpi
  sluice::mpi_transport check;  // another duplicate
  int const sparse = train(pipe, transport.rank(), check, 30);
  return sparse | dense_mpi_allreduce(check);
}
#endif

}  // namespace

#if DOCS_TRANSPORT_ZMQ
// docs/transport.md's other ways to build a zmq_transport: compiled, not run (they need the
// addresses, directories and key files they name).
void zmq_endpoints_and_ipc(int r) {
  // example-begin zmq-endpoints
  sluice::zmq_transport t({.endpoints = {"tcp://10.0.0.1:5000", "tcp://10.0.0.2:5000"}, .rank = r});
  sluice::zmq_transport u({.scheme = "ipc", .ipc_dir = "/run/sluice"});  // rendezvous, IPC data path
  // example-end zmq-endpoints
}

void zmq_curve() {
  // example-begin zmq-curve
  sluice::write_curve_keypair("rank0.pub", "rank0.key");  // once per rank (secret file mode 0600)
  // authorized: the public keys of all ranks, line r = rank r (the text of each rank<r>.pub)
  sluice::zmq_transport t(
      {.curve = true,
       .keys = {.public_key_file = "rank0.pub", .secret_key_file = "rank0.key", .authorized_keys_file = "authorized"}});
  // example-end zmq-curve
}
#endif

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "docs_transports: %s\n", e.what());
    return 1;
  }
}
