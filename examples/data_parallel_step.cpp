// Data-parallel training through sluice::pipeline, end to end in one process: 4 ranks (threads on
// the local transport) each compute the gradient of their own least-squares shard; the pipeline
// compensates it with error feedback, keeps the top 1% of each bucket, allgathers and averages the
// sparse frames and takes the SGD step, on its own threads, one step behind the trainer
// (staleness 1). Replicas must stay bit-identical; the loss must go down.
//   data_parallel_step [steps]
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

namespace {

constexpr int world = 4;
constexpr std::size_t rows_w = 128, cols_w = 128, dim = rows_w * cols_w;  // one 128 x 128 weight
constexpr std::size_t rows = 64;                                          // samples per rank and step

// Targets y = <a, w*> for a fixed sparse w*, with features drawn from the counter-based stream.
struct shard {
  sluice::random_stream rs;
  std::vector<float> w_star;
  float feature(std::uint64_t step, std::size_t row, std::size_t j) const {
    return rs.uniform((step * rows + row) * dim + j) - 0.5f;
  }
  // Gradient of 1/(2 rows) * sum (<a, w> - y)^2 into g, and the loss.
  double gradient(std::uint64_t step, std::span<float const> w, std::span<float> g) const {
    std::fill(g.begin(), g.end(), 0.0f);
    double loss = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      double pred = 0, y = 0;
      for (std::size_t j = 0; j < dim; ++j) {
        double const a = feature(step, r, j);
        pred += a * w[j];
        y += a * w_star[j];
      }
      double const err = pred - y;
      loss += 0.5 * err * err / rows;
      for (std::size_t j = 0; j < dim; ++j) g[j] += static_cast<float>(err * feature(step, r, j) / rows);
    }
    return loss;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int const steps = argc > 1 ? std::stoi(argv[1]) : 100;
  std::vector<float> w_star(dim);
  sluice::random_stream const truth({.seed = 99});
  for (std::size_t j = 0; j < dim; ++j) w_star[j] = (j % 64 == 0) ? 4.0f * (truth.uniform(j) - 0.5f) : 0.0f;

  auto transports = sluice::local_transport::create(world);
  sluice::layout model;
  model.add("w", {rows_w, cols_w});
  std::vector<std::vector<float>> weights(world, std::vector<float>(dim, 0.0f));
  std::vector<double> first_loss(world), last_loss(world);

  auto worker = [&](int rank) {
    sluice::local_transport transport = transports[static_cast<std::size_t>(rank)];
    shard const data{sluice::random_stream({.seed = 7, .rank = static_cast<std::uint32_t>(rank)}), w_star};
    std::vector<float> grad(dim);
    auto& w = weights[static_cast<std::size_t>(rank)];
    std::vector<std::span<float>> const params{w};
    std::vector<std::span<float const>> const grads{grad};
    auto compute_gradients = [&](int step) {
      double const loss = data.gradient(static_cast<std::uint64_t>(step), w, grad);
      if (step == 0) first_loss[static_cast<std::size_t>(rank)] = loss;
      last_loss[static_cast<std::size_t>(rank)] = loss;
    };
    // example-begin pipeline
    sluice::pipeline pipe{sluice::top_k{.ratio = 0.01},  // keep the largest 1% of each bucket
                          sluice::residual{},            // error feedback (EF-SGD): nothing is lost
                          sluice::sgd{.lr = 0.05},       // on fp32 master weights
                          std::move(transport),          // a local_transport endpoint, moved in
                          sluice::pipeline_options{.staleness = 1, .seed = 1}};
    pipe.attach(model, params);  // every rank, same layout (checked across ranks)
    for (int step = 0; step < steps; ++step) {
      compute_gradients(step);  // the trainer's forward and backward
      pipe.step(grads);         // compensate, compress, exchange, average, update
    }
    pipe.synchronize();  // the last `staleness` updates reach the parameters
    // example-end pipeline
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(worker, r);
  for (auto& th : threads) th.join();

  bool identical = true;
  for (int r = 1; r < world; ++r) identical = identical && weights[static_cast<std::size_t>(r)] == weights[0];
  double f = 0, l = 0;
  for (int r = 0; r < world; ++r)
    f += first_loss[static_cast<std::size_t>(r)], l += last_loss[static_cast<std::size_t>(r)];
  std::printf("%d ranks, %zu parameters, top_k 1%% + residual feedback + SGD, staleness 1, %d steps\n", world, dim,
              steps);
  std::printf("mean loss: step 0 %.4f -> step %d %.4f; replicas bit-identical: %s\n", f / world, steps - 1, l / world,
              identical ? "yes" : "NO");
  return identical && l < f ? 0 : 1;
}
