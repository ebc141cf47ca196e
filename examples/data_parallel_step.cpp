// Data-parallel training of one tensor with sparse communication, end to end in one process:
// 4 ranks (threads on the local transport) each compute a gradient of their own least-squares
// shard, compensate it with error feedback, keep the top 1%, allgather and sum the sparse frames,
// and take an SGD step. Replicas must stay bit-identical; the loss must go down.
//   data_parallel_step [steps]
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <sluice/sluice.hpp>

namespace {

constexpr int world = 4;
constexpr std::size_t dim = 1 << 14;  // parameters
constexpr std::size_t rows = 64;      // samples per rank and step

// Targets y = <a, w*> for a fixed w*, with rows drawn from the counter-based stream.
struct shard {
  sluice::random_stream rs;
  std::vector<float> w_star;
  float feature(std::uint64_t step, std::size_t row, std::size_t j) const {
    return rs.uniform((step * rows + row) * dim + j) - 0.5f;
  }
  // Gradient of 1/(2 rows) * sum (<a, w> - y)^2, and the loss.
  double gradient(std::uint64_t step, std::vector<float> const& w, std::vector<float>& g) const {
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
  sluice::top_k const codec{.ratio = 0.01};
  sluice::residual const feedback{};
  sluice::sgd const opt{.lr = 0.05};
  std::vector<std::vector<float>> params(world, std::vector<float>(dim, 0.0f));
  std::vector<double> first_loss(world), last_loss(world);

  auto worker = [&](int rank) {
    auto& t = transports[static_cast<std::size_t>(rank)];
    shard const data{sluice::random_stream({.seed = 7, .rank = static_cast<std::uint32_t>(rank)}), w_star};
    std::vector<std::size_t> const extents{dim};
    sluice::feedback_state residuals(feedback, extents);
    sluice::feedback_workspace<sluice::top_k, float> fws;
    sluice::allgather_workspace<sluice::top_k> aws;
    sluice::optimizer_state<sluice::sgd> ostate(opt, dim);
    std::vector<std::byte> frame(codec.max_encoded_bytes(dim));
    std::vector<float> grad(dim), sum(dim);
    auto& w = params[static_cast<std::size_t>(rank)];
    for (int step = 0; step < steps; ++step) {
      double const loss = data.gradient(static_cast<std::uint64_t>(step), w, grad);
      if (step == 0) first_loss[static_cast<std::size_t>(rank)] = loss;
      last_loss[static_cast<std::size_t>(rank)] = loss;
      sluice::collective_context const ctx{.step = static_cast<std::uint64_t>(step), .tensor = 0, .seed = 1};
      std::size_t const bytes = feedback.encode(codec, residuals.slice(0), std::span<float const>(grad),
                                                sluice::detail::encode_ctx(ctx, rank), fws, frame);
      sluice::sparse_allgather_encoded(t, codec, std::span<std::byte const>(frame.data(), bytes), sum, ctx, aws);
      for (float& x : sum) x /= world;  // mean gradient
      opt.step(ostate, w, std::span<float const>(sum));
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(worker, r);
  for (auto& th : threads) th.join();

  bool identical = true;
  for (int r = 1; r < world; ++r) identical = identical && params[static_cast<std::size_t>(r)] == params[0];
  double f = 0, l = 0;
  for (int r = 0; r < world; ++r)
    f += first_loss[static_cast<std::size_t>(r)], l += last_loss[static_cast<std::size_t>(r)];
  std::printf("%d ranks, %zu parameters, top_k 1%% + residual feedback + SGD, %d steps\n", world, dim, steps);
  std::printf("mean loss: step 0 %.4f -> step %d %.4f; replicas bit-identical: %s\n", f / world, steps - 1, l / world,
              identical ? "yes" : "NO");
  return identical && l < f ? 0 : 1;
}
