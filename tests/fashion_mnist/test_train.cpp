// A short seeded training run of the Fashion-MNIST example on the local transport: 2 workers as
// threads, block_top_k 1 % + residual + adam, staleness 1, one epoch. The test accuracy after that
// epoch must exceed 0.75 (it reaches 0.8082 with this seed; chance is 0.10), and both replicas must
// report the same accuracy (they are bit-identical). A behaviour test: nothing here is timed.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include <sluice/transport/local.hpp>

#include "trainer.hpp"

using namespace fashion_mnist;

TEST_CASE("two workers on local reach 75 % test accuracy after one epoch of block_top_k 1 % + residual") {
  data const d{load(default_data_dir, "train"), load(default_data_dir, "t10k")};
  train_options const o{.codec = "block_top_k",
                        .ratio = 0.01,
                        .feedback = "residual",
                        .optimizer = "adam",
                        .lr = 1e-3,
                        .staleness = 1,
                        .batch = 64,
                        .epochs = 1,
                        .seed = 7,
                        .progress = false};
  auto eps = sluice::local_transport::create(2);
  std::vector<train_result> results(2);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      results[r] = train(make_codec<sluice::block_top_k>(o), sluice::residual{}, sluice::adam{.lr = o.lr},
                         any_transport::make<sluice::local_transport>(eps[r]), d, o);
    });
  for (auto& t : threads) t.join();
  MESSAGE("test accuracy after one epoch: " << results[0].accuracy);
  CHECK(results[0].accuracy > 0.75);
  CHECK(results[0].accuracy == results[1].accuracy);
  CHECK(results[0].steps == 60000 / 2 / 64);
  CHECK(results[0].sent_bytes > 0);
  CHECK(results[0].sent_bytes < results[0].dense_bytes / 10);  // 1 % of the weights, plus dense biases
}
