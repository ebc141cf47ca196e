// Telemetry of the pipeline, as JSON lines: 2 ranks (threads on the local transport) train a model
// of eight 512 x 512 layers whose forward and backward are stood in for by a wait of a stated
// length, with block_top_k 1% + residual + Adam, and rank 0 writes every stage sample (start,
// duration, thread) and step report to a file. scripts/pipeline_timeline.sh plots the file: with
// staleness 0 the trainer waits for each step's exchange and update; with staleness 1 they run
// while the trainer computes the next step.
//   pipeline_telemetry <out.jsonl> [staleness=1] [compute_ms=40] [steps=6]
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <out.jsonl> [staleness=1] [compute_ms=40] [steps=6]\n", argv[0]);
    return 2;
  }
  unsigned const staleness = argc > 2 ? static_cast<unsigned>(std::stoul(argv[2])) : 1;
  auto const compute = std::chrono::milliseconds(argc > 3 ? std::stoi(argv[3]) : 40);
  int const steps = argc > 4 ? std::stoi(argv[4]) : 6;
  std::FILE* out = std::fopen(argv[1], "w");
  if (!out) {
    std::perror(argv[1]);
    return 1;
  }
  sluice::json_lines_sink sink(out);

  sluice::layout model;
  for (int i = 0; i < 8; ++i) model.add("layer" + std::to_string(i) + ".weight", {512, 512});
  auto transports = sluice::local_transport::create(2);
  auto worker = [&](int rank) {
    std::vector<std::vector<float>> params(model.size(), std::vector<float>(512 * 512, 0.0f));
    std::vector<std::vector<float>> grads(model.size(), std::vector<float>(512 * 512));
    sluice::random_stream const rs({.seed = 1, .rank = static_cast<std::uint32_t>(rank)});
    std::vector<std::span<float>> p(params.begin(), params.end());
    sluice::pipeline pipe{
        sluice::block_top_k{.ratio = 0.01}, sluice::residual{}, sluice::adam{.lr = 1e-3},
        transports[static_cast<std::size_t>(rank)],
        sluice::pipeline_options{.staleness = staleness, .bucketing = {.cap_bytes = 2 << 20}, .seed = 1}};
    pipe.attach(model, p);
    if (rank == 0) pipe.set_telemetry(sink);
    for (int step = 0; step < steps; ++step) {
      std::this_thread::sleep_for(compute);  // forward and backward
      for (std::size_t t = model.size(); t-- > 0;) {
        for (std::size_t j = 0; j < grads[t].size(); ++j) grads[t][j] = rs.uniform((step * 8 + t) * 262144 + j) - 0.5f;
        pipe.gradient_ready(t, grads[t]);  // as backward produces each gradient, last layer first
      }
      pipe.step();
    }
    pipe.synchronize();
  };
  std::thread other(worker, 1);
  worker(0);
  other.join();
  std::fclose(out);
  std::printf("wrote %s (staleness %u, %d steps of %lld ms compute)\n", argv[1], staleness, steps,
              static_cast<long long>(compute.count()));
  return 0;
}
