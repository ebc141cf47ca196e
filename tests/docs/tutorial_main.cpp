// docs/tutorial.md's main.cpp, compiled here exactly as the page shows it (test_docs keeps them
// equal): two workers as threads of one process, Fashion-MNIST through sluice::pipeline.
// example-begin main
#include <cstdio>
#include <thread>
#include <vector>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

#include "idx.hpp"
#include "mlp.hpp"

int main() {
  auto const train = fashion_mnist::load(fashion_mnist::default_data_dir, "train");
  auto const test = fashion_mnist::load(fashion_mnist::default_data_dir, "t10k");
  int const workers = 2;
  std::size_t const batch = 64, per_worker = train.count / workers;

  auto endpoints = sluice::local_transport::create(workers);  // one endpoint per worker thread
  std::vector<std::thread> threads;
  for (int rank = 0; rank < workers; ++rank)
    threads.emplace_back([&, rank] {
      fashion_mnist::mlp net({784, 256, 128, 10}, /*seed=*/1);
      sluice::pipeline pipe{sluice::block_top_k{.ratio = 0.01},  // send the largest 1 % (16-float blocks)
                            sluice::residual{},                  // keep what was not sent for later
                            sluice::adam{.lr = 1e-3},            // applied to fp32 master weights
                            endpoints[static_cast<std::size_t>(rank)],
                            sluice::pipeline_options{.staleness = 1, .seed = 7}};
      auto const params = net.parameters();
      pipe.attach(net.layout(), params);  // every rank starts from rank 0's parameters

      std::vector<std::size_t> shard(per_worker);  // this worker's contiguous slice
      for (std::size_t i = 0; i < per_worker; ++i) shard[i] = static_cast<std::size_t>(rank) * per_worker + i;
      for (int epoch = 1; epoch <= 3; ++epoch) {
        for (std::size_t at = 0; at + batch <= shard.size(); at += batch) {
          net.train_batch(train, std::span<std::size_t const>(shard).subspan(at, batch));  // forward + backward
          pipe.step(net.gradients());  // compress, exchange, update the parameters
        }
        pipe.synchronize();  // every update applied: the replicas are bit-identical
        double const accuracy = net.accuracy(test);
        if (rank == 0) std::printf("epoch %d: test accuracy %.4f\n", epoch, accuracy);
      }
    });
  for (auto& t : threads) t.join();
}
// example-end main
