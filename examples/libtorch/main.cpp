// libtorch_fashion_mnist: a small CNN written with libtorch, trained on Fashion-MNIST
// (apt-get install dataset-fashion-mnist) by data-parallel workers through sluice::pipeline. Each
// worker has its own replica: threads on sluice's in-process transport, or processes over ZeroMQ.
//
// What it takes to put sluice into an existing libtorch trainer is in train_worker(): build a
// sluice::torch_parameters from the module, attach it to a pipeline, register the gradient hooks,
// and call pipe.step() where the trainer called optimizer.step() (the pipeline replaces both the
// allreduce and the torch optimizer). Everything else is an ordinary libtorch training loop.
//
//   libtorch_fashion_mnist --workers 4 --epochs 5                  # block_top_k 1 % + residual + adam
//   libtorch_fashion_mnist --workers 4 --epochs 5 --codec identity # dense: fp32 ring allreduce + adam
//   libtorch_fashion_mnist --transport zmq --spawn --workers 4     # 4 processes over ZeroMQ on loopback
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/torch/torch.hpp>  // before torch/torch.h: it wraps the torch headers in warning pragmas
#include <sluice/transport/local.hpp>
#if LIBTORCH_EXAMPLE_HAVE_ZMQ
#include <sluice/transport/zmq.hpp>
#endif

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <torch/torch.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include "idx.hpp"  // examples/fashion_mnist: the gzip IDX reader and loader

namespace {

using clock_type = std::chrono::steady_clock;
double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

// The model: an ordinary libtorch module; nothing in it knows about sluice.
// 28x28 -> conv 5x5 (8) -> pool -> conv 5x5 (16) -> pool -> 784 -> 128 -> 10.
struct cnn : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 8, 5).padding(2)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(8, 16, 5).padding(2)};
  torch::nn::Linear fc1{16 * 7 * 7, 128}, fc2{128, 10};
  cnn() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
};

struct options {
  int workers = 4;
  std::string codec = "block_top_k";  // block_top_k (+ residual) or identity (dense)
  double ratio = 0.01;
  double lr = 1e-3;
  unsigned staleness = 1;
  std::int64_t batch = 64;  // per worker
  unsigned epochs = 5;
  std::uint64_t seed = 1;
  std::string data_dir{fashion_mnist::default_data_dir};
  std::string transport = "local";
  bool spawn = false;
  int master_port = 29511;
};

// One split as tensors: images [n, 1, 28, 28] float32 (normalized), labels [n] int64.
struct split {
  torch::Tensor images, labels;
};
split to_tensors(fashion_mnist::dataset const& d) {
  auto const n = static_cast<std::int64_t>(d.count);
  auto images = torch::from_blob(const_cast<float*>(d.images.data()), {n, 1, 28, 28}).clone();
  auto labels = torch::from_blob(const_cast<std::uint8_t*>(d.labels.data()), {n}, torch::kUInt8).to(torch::kInt64);
  return {images, labels};
}

double accuracy(cnn& model, split const& test) {
  torch::NoGradGuard no_grad;
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < test.images.size(0); i += 1000) {
    auto const x = test.images.slice(0, i, i + 1000), y = test.labels.slice(0, i, i + 1000);
    correct += model.forward(x).argmax(1).eq(y).sum().item<std::int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(test.images.size(0));
}

// One worker: trains its replica on its shard of the training set. Rank 0 evaluates after every
// epoch and prints the test accuracy and the time this trainer waited inside sluice per step.
template <class Codec, class Feedback, class Transport>
void train_worker(Codec codec, Feedback feedback, Transport& transport, cnn& model, split const& train,
                  split const& test, options const& o) {
  torch::set_num_threads(1);  // one intra-op thread per worker (the threading setting is per thread)
  int const rank = transport.rank();

  // example-begin torch-attach
  // The module's parameters as sluice sees them: a layout (names, shapes) and spans over the
  // tensors' own memory. The pipeline writes each update there, in place: no torch optimizer.
  sluice::torch_parameters params(model);
  sluice::pipeline pipe{codec, feedback, sluice::adam{.lr = o.lr}, transport,
                        sluice::pipeline_options{.staleness = o.staleness, .seed = o.seed, .kernel_threads = 1}};
  pipe.attach(params.layout(), params.spans());  // also copies rank 0's initial parameters to every rank

  // As backward finishes each parameter's gradient, hand it to the pipeline: a bucket starts
  // compressing and exchanging while backward goes on. The lambda times the hand-over.
  double waited = 0;  // seconds this trainer spent inside pipeline calls
  sluice::torch_gradient_hooks hooks(params, [&](std::size_t i, std::span<float const> grad) {
    auto const t0 = clock_type::now();
    pipe.gradient_ready(i, grad);
    waited += seconds(clock_type::now() - t0);
  });
  // example-end torch-attach

  // This worker's shard: a slice of one seeded permutation, reshuffled every epoch.
  auto const per = train.images.size(0) / transport.size();
  sluice::require(per >= o.batch, sluice::errc::invalid_argument,
                  "a shard of {} images holds no batch of {}; use fewer workers or a smaller --batch", per, o.batch);
  std::vector<std::int64_t> shard(static_cast<std::size_t>(train.images.size(0)));
  std::iota(shard.begin(), shard.end(), std::int64_t{0});
  std::shuffle(shard.begin(), shard.end(), std::mt19937_64(o.seed));
  shard = {shard.begin() + rank * per, shard.begin() + (rank + 1) * per};

  for (unsigned epoch = 1; epoch <= o.epochs; ++epoch) {
    std::shuffle(shard.begin(), shard.end(), std::mt19937_64(o.seed * 1000003 + epoch * 131 + unsigned(rank)));
    double compute = 0, loss_sum = 0;
    double const waited_before = waited;
    auto const epoch_start = clock_type::now();
    std::int64_t const steps = per / o.batch;
    for (std::int64_t s = 0; s < steps; ++s) {
      auto const idx = torch::from_blob(shard.data() + s * o.batch, {o.batch}, torch::kInt64);
      auto const x = train.images.index_select(0, idx), y = train.labels.index_select(0, idx);

      auto const t0 = clock_type::now();
      double const waited_before_step = waited;
      // example-begin torch-step
      model.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model.forward(x), y);
      loss.backward();  // the hooks hand every gradient to the pipeline in here
      auto const t1 = clock_type::now();
      pipe.step();  // ends the step: the parameters now hold the updates up to this step - staleness
      // example-end torch-step
      auto const t2 = clock_type::now();
      compute += seconds(t1 - t0) - (waited - waited_before_step);  // forward + backward, hand-overs excluded
      waited += seconds(t2 - t1);
      loss_sum += loss.item<double>();
    }
    pipe.synchronize();  // every update in (the staleness window drains) before evaluating
    if (rank != 0) continue;
    double const train_seconds = seconds(clock_type::now() - epoch_start);
    double const in_sluice = waited - waited_before;
    fmt::print(
        "epoch {:>2}  loss {:.4f}  test accuracy {:.4f}  per step: compute {:.2f} ms, in sluice {:.2f} ms "
        "(overhead {:.1f} %)  {:.1f} s\n",
        epoch, loss_sum / static_cast<double>(steps), accuracy(model, test), 1e3 * compute / static_cast<double>(steps),
        1e3 * in_sluice / static_cast<double>(steps), 100.0 * in_sluice / compute, train_seconds);
    std::fflush(stdout);
  }
}

// The codec the command line chose: each choice is one pipeline type, compiled in.
template <class Transport>
void train_with_codec(Transport& transport, cnn& model, split const& train, split const& test, options const& o) {
  if (o.codec == "identity")
    train_worker(sluice::identity{}, sluice::no_feedback{}, transport, model, train, test, o);
  else
    train_worker(sluice::block_top_k{.ratio = o.ratio}, sluice::residual{}, transport, model, train, test, o);
}

// FNV-1a over the parameters' bytes: equal on every rank when the replicas are bit-identical.
std::uint64_t parameter_hash(cnn const& model) {
  std::uint64_t h = 14695981039346656037ull;
  for (auto const& p : model.parameters()) {
    auto const* b = static_cast<unsigned char const*>(p.data_ptr());
    for (std::size_t i = 0; i < static_cast<std::size_t>(p.nbytes()); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

std::string describe(options const& o) {
  return fmt::format(
      "{}, Adam lr {}, batch {} per worker, staleness {}",
      o.codec == "identity" ? std::string("dense (identity)") : fmt::format("block_top_k {} + residual", o.ratio), o.lr,
      o.batch, o.staleness);
}

// Workers as threads of this process, one local_transport endpoint and one replica each.
int run_threads(options const& o, split const& train, split const& test) {
  fmt::print("{} workers (threads on sluice's local transport), {}\n", o.workers, describe(o));
  // The replicas are built here (libtorch's seed is global); attach() then copies rank 0's
  // initial parameters to every rank anyway.
  torch::manual_seed(o.seed);
  std::vector<cnn> models(static_cast<std::size_t>(o.workers));
  auto transports = sluice::local_transport::create(o.workers);
  std::vector<std::exception_ptr> errors(models.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < models.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        train_with_codec(transports[r], models[r], train, test, o);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto const& e : errors)
    if (e) std::rethrow_exception(e);
  bool same = true;  // every replica took the same updates: their parameters agree bit for bit
  for (auto const& m : models) same = same && parameter_hash(m) == parameter_hash(models[0]);
  fmt::print("replicas bit-identical across the {} workers: {}\n", o.workers, same ? "yes" : "NO");
  return same ? 0 : 1;
}

#if LIBTORCH_EXAMPLE_HAVE_ZMQ
// One worker per process over ZeroMQ: rank and rendezvous from the torchrun-style variables RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT (or those zmq_options give).
int run_process(options const& o, sluice::zmq_options zo) {
  torch::set_num_threads(1);
  sluice::zmq_transport transport(std::move(zo));
  split const train_split = to_tensors(fashion_mnist::load(o.data_dir, "train"));
  split const test_split = to_tensors(fashion_mnist::load(o.data_dir, "t10k"));
  if (transport.rank() == 0) fmt::print("{} workers (processes over ZeroMQ), {}\n", transport.size(), describe(o));
  std::fflush(stdout);
  torch::manual_seed(o.seed);
  cnn model;
  train_with_codec(transport, model, train_split, test_split, o);
  fmt::print("rank {}: parameter hash {:016x} (equal on every rank: replicas bit-identical)\n", transport.rank(),
             parameter_hash(model));
  return 0;
}

// --spawn: --workers processes on 127.0.0.1, forked before libtorch starts any thread.
int spawn(options const& o) {
  std::vector<pid_t> children;
  for (int r = 0; r < o.workers; ++r) {
    std::fflush(stdout);
    pid_t const pid = ::fork();
    sluice::require(pid >= 0, sluice::errc::unsupported, "--spawn: fork() failed");
    if (pid == 0) {
      int rc = 1;
      try {
        rc = run_process(o, sluice::zmq_options{.rank = r,
                                                .world_size = o.workers,
                                                .master_addr = "127.0.0.1",
                                                .master_port = o.master_port,
                                                .host = "127.0.0.1"});
      } catch (std::exception const& e) {
        fmt::print(stderr, "libtorch_fashion_mnist: rank {}: {}\n", r, e.what());
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
    failed += WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
  }
  return failed > 0 ? 1 : 0;
}
#endif

// Threads of one process share the BLAS that libtorch's conv and linear layers call. OpenBLAS's
// sequential build corrupts results silently when several threads call it at once: refuse it.
void require_thread_safe_blas(int workers) {
  using query = int (*)();
  auto const parallel = reinterpret_cast<query>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  sluice::require(workers == 1 || parallel == nullptr || parallel() != 0, sluice::errc::unsupported,
                  "libtorch_fashion_mnist: libtorch runs on OpenBLAS's sequential build, which is not safe when "
                  "{} worker threads call it at once; install libopenblas0-pthread (or select another BLAS with "
                  "update-alternatives --config libblas.so.3-x86_64-linux-gnu), or use --workers 1",
                  workers);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"Trains a libtorch CNN on Fashion-MNIST data-parallel through sluice::pipeline"};
  app.add_option("--workers", o.workers, "workers (threads with local, processes with --spawn)")
      ->check(CLI::Range(1, 64));
  app.add_option("--transport", o.transport,
                 "local (threads) or zmq (processes: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or --spawn)")
      ->check(CLI::IsMember({"local", "zmq"}));
  app.add_flag("--spawn", o.spawn, "zmq: fork --workers processes on 127.0.0.1 and run the whole job");
  app.add_option("--master-port", o.master_port, "--spawn: rendezvous port on 127.0.0.1");
  app.add_option("--codec", o.codec, "block_top_k (with residual error feedback) or identity (dense)")
      ->check(CLI::IsMember({"block_top_k", "identity"}));
  app.add_option("--ratio", o.ratio, "block_top_k: fraction of elements kept")->check(CLI::Range(1e-6, 1.0));
  app.add_option("--lr", o.lr, "Adam learning rate");
  app.add_option("--staleness", o.staleness, "updates the parameters may lag behind (0, 1, 2)")
      ->check(CLI::Range(0u, 2u));
  app.add_option("--batch", o.batch, "images per worker and step")->check(CLI::Range(1, 60000));
  app.add_option("--epochs", o.epochs, "epochs")->check(CLI::Range(1u, 1000u));
  app.add_option("--seed", o.seed, "seed of initialization, shards and order");
  app.add_option("--data", o.data_dir, "directory of the four Fashion-MNIST .gz files");
  CLI11_PARSE(app, argc, argv);

  try {
    if (o.transport == "zmq") {
#if LIBTORCH_EXAMPLE_HAVE_ZMQ
      return o.spawn ? spawn(o) : run_process(o, sluice::zmq_options{});
#else
      sluice::throw_error(sluice::errc::unsupported, "--transport zmq: built without ZeroMQ (install cppzmq-dev)");
#endif
    }
    require_thread_safe_blas(o.workers);
    torch::set_num_threads(1);
    split const train = to_tensors(fashion_mnist::load(o.data_dir, "train"));
    split const test = to_tensors(fashion_mnist::load(o.data_dir, "t10k"));
    return run_threads(o, train, test);
  } catch (std::exception const& e) {
    fmt::print(stderr, "libtorch_fashion_mnist: {}\n", e.what());
    return 1;
  }
}
