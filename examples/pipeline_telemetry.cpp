// Telemetry of the pipeline, as JSON lines: 2 ranks (threads on the local transport) train a model
// of eight 512 x 512 layers whose forward and backward are stood in for by a wait of a stated
// length, with block_top_k 1% + residual + Adam, and rank 0 writes every stage sample (start,
// duration, thread) and step report to a file. scripts/pipeline_timeline.sh plots the file: with
// staleness 0 the trainer waits for each step's exchange and update; with staleness 1 they run
// while the trainer computes the next step. With homes "pipeline" the parameters and gradients
// live in the pipeline's buffers (parameter_home::pipeline, gradient_home::pipeline): the
// trainer's thread copies nothing, and the encode thread reads nothing before it encodes.
//   pipeline_telemetry <out.jsonl> [staleness=1] [compute_ms=40] [steps=6] [homes=trainer|pipeline]
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <out.jsonl> [staleness=1] [compute_ms=40] [steps=6] [homes=trainer|pipeline]\n",
                 argv[0]);
    return 2;
  }
  unsigned const staleness = argc > 2 ? static_cast<unsigned>(std::stoul(argv[2])) : 1;
  auto const compute = std::chrono::milliseconds(argc > 3 ? std::stoi(argv[3]) : 40);
  int const steps = argc > 4 ? std::stoi(argv[4]) : 6;
  bool const owned = argc > 5 && std::string(argv[5]) == "pipeline";
  if (argc > 5 && !owned && std::string(argv[5]) != "trainer") {
    std::fprintf(stderr, "homes: trainer or pipeline, not %s\n", argv[5]);
    return 2;
  }
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
    sluice::pipeline_options options{.staleness = staleness, .bucketing = {.cap_bytes = 2 << 20}, .seed = 1};
    if (owned) {
      options.parameters = sluice::parameter_home::pipeline;
      options.gradients = sluice::gradient_home::pipeline;
    }
    sluice::pipeline pipe{sluice::block_top_k{.ratio = 0.01}, sluice::residual{}, sluice::adam{.lr = 1e-3},
                          transports[static_cast<std::size_t>(rank)], options};
    pipe.attach(model, p);
    if (rank == 0) pipe.set_telemetry(sink);
    for (int step = 0; step < steps; ++step) {
      std::this_thread::sleep_for(compute);  // forward and backward
      // Backward writes each gradient into the trainer's memory, or into the pipeline's buffer.
      auto const into = owned ? pipe.gradients() : std::span<std::span<float> const>{};
      for (std::size_t t = model.size(); t-- > 0;) {
        std::span<float> const g = owned ? into[t] : std::span<float>(grads[t]);
        for (std::size_t j = 0; j < g.size(); ++j) g[j] = rs.uniform((step * 8 + t) * 262144 + j) - 0.5f;
        if (owned)
          pipe.gradient_ready(t);  // from here the buffer is the pipeline's
        else
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
  std::printf("wrote %s (staleness %u, %d steps of %lld ms compute, %s)\n", argv[1], staleness, steps,
              static_cast<long long>(compute.count()),
              owned ? "parameters and gradients in the pipeline" : "the trainer's memory");
  return 0;
}
