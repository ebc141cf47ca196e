// fashion_mnist: trains an MLP on Fashion-MNIST data-parallel through sluice::pipeline, with
// workers as threads (--transport local), as ZeroMQ processes (--transport zmq: ranks from the
// torchrun-style RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or --spawn N processes on loopback)
// or under mpirun (--transport mpi). Rank 0 prints a progress line at every evaluation and a
// summary, and writes the summary as JSON with --json FILE. `fashion_mnist --help` lists the options.
//
//   fashion_mnist --workers 4 --codec block_top_k --ratio 0.01 --feedback residual --optimizer adam
//   fashion_mnist --transport zmq --spawn --workers 4 --target-accuracy 0.86
//   mpirun -np 4 --oversubscribe fashion_mnist --transport mpi
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <sluice/transport/local.hpp>
#if FASHION_MNIST_HAVE_ZMQ
#include <sluice/transport/zmq.hpp>
#endif
#if FASHION_MNIST_HAVE_MPI
#include <sluice/transport/mpi.hpp>
#endif

#include "trainer.hpp"

namespace {

using namespace fashion_mnist;

struct job {
  train_options train;
  std::string transport = "local";
  int workers = 4;
  bool spawn = false;
  std::string data_dir{default_data_dir};
  std::string json;
};

std::string describe(job const& j) {
  auto const& o = j.train;
  std::string codec = o.codec;
  if (o.codec == "top_k" || o.codec == "block_top_k" || o.codec == "random_k") codec += fmt::format(" {:g}", o.ratio);
  if (o.codec == "maxmin_quantize" || o.codec == "qsgd") codec += fmt::format(" {} bit", o.bits);
  if (o.codec == "qsgd" && o.feedback != "none" && o.bits >= 2 && o.bits <= 8)
    codec += fmt::format(" (bucket {})", qsgd_bucket((1u << (o.bits - 1)) - 1, o.feedback));
  if (o.exchange == "mpi_allreduce") codec += " (MPI_Allreduce)";
  std::string const warm = o.warmup_epochs > 0 ? fmt::format(" (warm-up {} epochs)", o.warmup_epochs) : "";
  return fmt::format("{}{} + {} + {}", codec, warm, o.feedback, o.optimizer);
}

void report(job const& j, train_result const& r) {
  auto const& o = j.train;
  std::string target = "no target";
  if (o.target_accuracy > 0)
    target = r.time_to_target >= 0
                 ? fmt::format("target {:.4f} reached after {:.1f} s", o.target_accuracy, r.time_to_target)
                 : fmt::format("target {:.4f} not reached", o.target_accuracy);
  fmt::print(
      "summary: {}, {} workers ({}), staleness {} ({}): test accuracy {:.4f} after {} epochs ({} steps), {:.1f} s "
      "({:.1f} s training), {}, sent {:.2f} MB per worker ({:.1f} % of the fp32 gradients' bytes)\n",
      describe(j), r.workers, j.transport, o.staleness, o.compensation, r.accuracy, r.epochs, r.steps, r.wall_seconds,
      r.train_seconds, target, static_cast<double>(r.sent_bytes) / 1e6,
      r.dense_bytes > 0 ? 100.0 * static_cast<double>(r.sent_bytes) / static_cast<double>(r.dense_bytes) : 0.0);
  std::string curve;
  for (auto const& p : r.curve)
    curve += fmt::format(
        "{}{{\"epoch\":{},\"step\":{},\"seconds\":{:.3f},\"loss\":{:.5f},\"accuracy\":{:.4f},\"sent_bytes\":{}}}",
        curve.empty() ? "" : ",", p.epoch, p.step, p.seconds, p.loss, p.accuracy, p.sent_bytes);
  std::string const json = fmt::format(
      "{{\"codec\":\"{}\",\"exchange\":\"{}\",\"ratio\":{},\"bits\":{},\"feedback\":\"{}\",\"optimizer\":\"{}\","
      "\"lr\":{},\"momentum\":{},\"warmup_epochs\":{},\"transport\":\"{}\","
      "\"workers\":{},\"staleness\":{},\"compensation\":\"{}\",\"batch\":{},\"batches\":[{}],\"slow_rank\":{},"
      "\"slow_factor\":{},\"device_us_per_image\":{},\"seed\":{},\"sizes\":[{}],\"target_"
      "accuracy\":{},"
      "\"accuracy\":{:.4f},\"epochs\":{},\"steps\":{},\"wall_seconds\":{:.3f},\"train_seconds\":{:.3f},"
      "\"time_to_target\":{:.3f},\"sent_bytes\":{},\"dense_bytes\":{},\"curve\":[{}]}}\n",
      o.codec, o.exchange, o.ratio, o.bits, o.feedback, o.optimizer, o.lr, o.momentum, o.warmup_epochs, j.transport,
      r.workers, o.staleness, o.compensation, o.batch, fmt::join(r.batches, ","), o.slow_rank, o.slow_factor,
      o.device_us_per_image, o.seed, fmt::join(o.sizes, ","), o.target_accuracy, r.accuracy, r.epochs, r.steps,
      r.wall_seconds, r.train_seconds, r.time_to_target, r.sent_bytes, r.dense_bytes, curve);
  if (j.json.empty()) return;
  if (j.json == "-") {
    std::fputs(json.c_str(), stdout);
    return;
  }
  std::FILE* f = std::fopen(j.json.c_str(), "w");
  sluice::require(f != nullptr, sluice::errc::invalid_argument, "--json: cannot write '{}'", j.json);
  std::fputs(json.c_str(), f);
  std::fclose(f);
}

// Workers as threads of this process, one local_transport endpoint each.
int run_local(job const& j, data const& d) {
  auto eps = sluice::local_transport::create(j.workers);
  std::vector<train_result> results(static_cast<std::size_t>(j.workers));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(j.workers));
  std::vector<std::thread> threads;
  for (int r = 0; r < j.workers; ++r)
    threads.emplace_back([&, r] {
      auto const i = static_cast<std::size_t>(r);
      try {
        results[i] = train_any(any_transport::make<sluice::local_transport>(eps[i]), d, j.train);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto const& e : errors)
    if (e) std::rethrow_exception(e);
  report(j, results[0]);
  return 0;
}

#if FASHION_MNIST_HAVE_ZMQ
int run_zmq_rank(job const& j, data const& d, sluice::zmq_options zo) {
  auto t = any_transport::make<sluice::zmq_transport>(std::move(zo));
  int const rank = t.rank();
  train_result const r = train_any(std::move(t), d, j.train);
  if (rank == 0) report(j, r);
  return 0;
}

// A free TCP port on loopback (the kernel picks it; a race with another program is possible).
// A port on 127.0.0.1 nobody listens on, drawn below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), where no outgoing connection can take it before rank 0 binds it.
int free_port() {
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  std::mt19937 draw(std::random_device{}());
  std::uniform_int_distribution<int> pick(10000, std::max(low, 11000) - 1);
  for (int attempt = 0; attempt < 256; ++attempt) {
    int const s = ::socket(AF_INET, SOCK_STREAM, 0);
    sluice::require(s >= 0, sluice::errc::unsupported, "--spawn: socket() failed");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int const port = pick(draw);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    bool const ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(s);
    if (ok) return port;
  }
  throw sluice::error(sluice::errc::unsupported, "--spawn: cannot find a free port on 127.0.0.1");
}

// --spawn: forks one process per worker on 127.0.0.1 (before any thread exists) and waits for them.
int run_zmq_spawn(job const& j, data const& d) {
  int const port = free_port();
  std::vector<pid_t> children;
  for (int r = 0; r < j.workers; ++r) {
    std::fflush(stdout);
    pid_t const pid = ::fork();
    sluice::require(pid >= 0, sluice::errc::unsupported, "--spawn: fork() failed");
    if (pid == 0) {
      int rc = 1;
      try {
        rc = run_zmq_rank(j, d,
                          sluice::zmq_options{.rank = r,
                                              .world_size = j.workers,
                                              .master_addr = "127.0.0.1",
                                              .master_port = port,
                                              .host = "127.0.0.1"});
      } catch (std::exception const& e) {
        fmt::print(stderr, "fashion_mnist: rank {}: {}\n", r, e.what());
      }
      std::fflush(stdout);
      std::_Exit(rc);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed > 0) fmt::print(stderr, "fashion_mnist: {} of {} worker processes failed\n", failed, j.workers);
  return failed > 0 ? 1 : 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  job j;
  auto& o = j.train;
  CLI::App app{"Trains an MLP on Fashion-MNIST data-parallel through sluice::pipeline"};
  app.add_option("--workers", j.workers, "workers (threads with local, processes with --spawn)")
      ->check(CLI::Range(1, 256));
  app.add_option("--transport", j.transport,
                 "local (threads), zmq (processes: RANK, WORLD_SIZE, MASTER_ADDR, "
                 "MASTER_PORT, or --spawn) or mpi (under mpirun)")
      ->check(CLI::IsMember({"local", "zmq", "mpi"}));
  app.add_flag("--spawn", j.spawn, "zmq: fork --workers processes on 127.0.0.1 and run the whole job");
  app.add_option("--codec", o.codec, "gradient codec")
      ->check(CLI::IsMember({"identity", "top_k", "block_top_k", "maxmin_quantize", "random_k", "qsgd", "sign"}));
  app.add_option("--ratio", o.ratio, "top_k, block_top_k, random_k: fraction kept")->check(CLI::Range(1e-6, 1.0));
  app.add_option("--bits", o.bits, "maxmin_quantize: bits per element; qsgd: 2^(bits-1)-1 levels")
      ->check(CLI::Range(1u, 8u));
  app.add_option("--exchange", o.exchange,
                 "codec: the collective the codec calls for; mpi_allreduce: dense through MPI_Allreduce "
                 "(the DDP-equivalent baseline: --codec identity --feedback none --optimizer adam --transport mpi); "
                 "hierarchical: groups summed on their leader, the leaders' sum compressed; hierarchical_gather "
                 "(sparse codecs): every rank's frame, gathered by the leaders (flat's sum, fewer frames between "
                 "groups)")
      ->check(CLI::IsMember({"codec", "mpi_allreduce", "hierarchical", "hierarchical_gather"}));
  app.add_option("--group-size", o.group_size,
                 "hierarchical, hierarchical_gather: ranks per group (consecutive ranks, the first leads); 0: "
                 "LOCAL_WORLD_SIZE");
  app.add_option("--slow-rank", o.slow_rank, "this rank computes --slow-factor times slower (heterogeneous workers)");
  app.add_option("--slow-factor", o.slow_factor, "how much slower --slow-rank computes")->check(CLI::Range(1.0, 100.0));
  app.add_option("--device-us-per-image", o.device_us_per_image,
                 "emulate an accelerator: every forward/backward also waits this many microseconds per image, off "
                 "the CPU (times --slow-factor on --slow-rank)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--batch-sizes", o.batches,
                 "per-worker batch sizes, one per worker (heterogeneous workers: sum b_r g_r / sum b)");
  app.add_flag("--plan-batches", o.plan_batches,
               "time every worker's compute, then split --batch x workers with the solver's allocate_batches "
               "(prints the sizes: pass them to --batch-sizes to repeat the run)")
      ->excludes("--batch-sizes");
  app.add_option("--feedback", o.feedback,
                 "error feedback; momentum_correction: DGC's (top_k, block_top_k; --momentum is then the "
                 "feedback's and sgd runs without)")
      ->check(CLI::IsMember({"none", "residual", "ef21", "momentum_correction"}));
  app.add_option("--warmup-epochs", o.warmup_epochs,
                 "DGC's warm-up: top_k, block_top_k, random_k keep 25 % at first, ramping geometrically to --ratio "
                 "over these epochs (one stage each)");
  app.add_option("--optimizer", o.optimizer, "optimizer")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--lr", o.lr, "learning rate");
  app.add_option("--momentum", o.momentum, "sgd momentum");
  app.add_option("--staleness", o.staleness, "updates the parameters may lag behind (0, 1, 2)")
      ->check(CLI::Range(0u, 2u));
  app.add_option("--compensation", o.compensation,
                 "the trainer's parameters with staleness: local_step (the default), weight_prediction or none")
      ->check(CLI::IsMember({"none", "weight_prediction", "local_step"}));
  app.add_option("--batch", o.batch, "images per worker and step")
      ->check(CLI::Range(std::size_t{1}, std::size_t{60000}));
  app.add_option("--epochs", o.epochs, "epochs at most")->check(CLI::Range(1u, 1000u));
  app.add_option("--target-accuracy", o.target_accuracy, "stop when the test accuracy reaches it (0: never)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--eval-every", o.eval_every, "evaluate every this many steps (0: once per epoch)");
  app.add_option("--seed", o.seed, "seed of initialization, shards, order and random codecs");
  app.add_option("--sizes", o.sizes, "layer widths, input first")->expected(2, 16);
  app.add_option("--data", j.data_dir, "directory of the four Fashion-MNIST .gz files");
  app.add_option("--json", j.json, "write the summary as JSON to this file (- for stdout)");
  bool quiet = false;
  app.add_flag("--quiet", quiet, "no progress lines");
  CLI11_PARSE(app, argc, argv);
  o.progress = !quiet;

  try {
    sluice::require(o.exchange != "mpi_allreduce" || j.transport == "mpi", sluice::errc::invalid_argument,
                    "--exchange mpi_allreduce calls MPI_Allreduce: run under mpirun with --transport mpi");
    data d{load(j.data_dir, "train"), load(j.data_dir, "t10k")};
    if (j.transport == "local") return run_local(j, d);
    if (j.transport == "zmq") {
#if FASHION_MNIST_HAVE_ZMQ
      if (j.spawn) return run_zmq_spawn(j, d);
      return run_zmq_rank(j, d, sluice::zmq_options{});
#else
      sluice::throw_error(sluice::errc::unsupported, "--transport zmq: built without ZeroMQ (install cppzmq-dev)");
#endif
    }
#if FASHION_MNIST_HAVE_MPI
    sluice::mpi_environment env(&argc, &argv);
    auto t = any_transport::make<sluice::mpi_transport>();
    int const rank = t.rank();
    j.workers = t.size();
    train_result const r = train_any(std::move(t), d, j.train);
    if (rank == 0) report(j, r);
    return 0;
#else
    sluice::throw_error(sluice::errc::unsupported, "--transport mpi: built without MPI (install libopenmpi-dev)");
#endif
  } catch (std::exception const& e) {
    fmt::print(stderr, "fashion_mnist: {}\n", e.what());
    return 1;
  }
}
