// libtorch_fashion_mnist: a small CNN written with libtorch, trained on Fashion-MNIST
// (apt-get install dataset-fashion-mnist) by data-parallel workers through sluice::pipeline. Each
// worker is a thread with its own replica and its own endpoint of sluice's in-process transport.
//
// What it takes to put sluice into an existing libtorch trainer is in train_worker(): build a
// sluice::torch_parameters from the module, attach it to a pipeline, register the gradient hooks,
// and call pipe.step() where the trainer called optimizer.step() (the pipeline replaces both the
// allreduce and the torch optimizer). Everything else is an ordinary libtorch training loop.
//
//   libtorch_fashion_mnist --workers 4 --epochs 5                  # block_top_k 1 % + residual + adam
//   libtorch_fashion_mnist --workers 4 --epochs 5 --codec identity # dense: fp32 ring allreduce + adam
#include <dlfcn.h>

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
template <class Codec, class Feedback>
void train_worker(Codec codec, Feedback feedback, sluice::local_transport& transport, cnn& model, split const& train,
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
  auto const per = train.images.size(0) / o.workers;
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
  app.add_option("--workers", o.workers, "workers (threads, one model replica each)")->check(CLI::Range(1, 64));
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
    require_thread_safe_blas(o.workers);
    torch::set_num_threads(1);
    split const train = to_tensors(fashion_mnist::load(o.data_dir, "train"));
    split const test = to_tensors(fashion_mnist::load(o.data_dir, "t10k"));
    sluice::require(train.images.size(0) / o.workers >= o.batch, sluice::errc::invalid_argument,
                    "a shard of {} images holds no batch of {}; use fewer workers or a smaller --batch",
                    train.images.size(0) / o.workers, o.batch);
    fmt::print(
        "{} workers (threads on sluice's local transport), {}, Adam lr {}, batch {} per worker, staleness {}\n",
        o.workers,
        o.codec == "identity" ? std::string("dense (identity)") : fmt::format("block_top_k {} + residual", o.ratio),
        o.lr, o.batch, o.staleness);

    // One replica per worker, built here (the seed is global in libtorch); attach() then copies
    // rank 0's initial parameters to every rank anyway.
    torch::manual_seed(o.seed);
    std::vector<cnn> models(static_cast<std::size_t>(o.workers));
    auto transports = sluice::local_transport::create(o.workers);
    std::vector<std::exception_ptr> errors(models.size());
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < models.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          if (o.codec == "identity")
            train_worker(sluice::identity{}, sluice::no_feedback{}, transports[r], models[r], train, test, o);
          else
            train_worker(sluice::block_top_k{.ratio = o.ratio}, sluice::residual{}, transports[r], models[r], train,
                         test, o);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto const& e : errors)
      if (e) std::rethrow_exception(e);

    // Every replica took the same updates: their parameters agree bit for bit.
    bool same = true;
    for (auto const& m : models)
      for (std::size_t i = 0; i < m.parameters().size(); ++i)
        same = same && torch::equal(m.parameters()[i], models[0].parameters()[i]);
    fmt::print("replicas bit-identical across the {} workers: {}\n", o.workers, same ? "yes" : "NO");
    return same ? 0 : 1;
  } catch (std::exception const& e) {
    fmt::print(stderr, "libtorch_fashion_mnist: {}\n", e.what());
    return 1;
  }
}
