// The pipeline's CPU work per step and rank, W, measured the same way against any sluice tree
// since the pipeline's first release (0c0ace1), so that one run compares commits side by side:
// scripts/cpu-work-probe.sh builds it against a commit's headers. ResNet-50's layout, 1 or 2
// ranks on the local transport, each rank and the stage threads it starts pinned to a core of
// its own, kernel_threads 1, staleness 0, no compute: process CPU time per step over the ranks.
//
//   cpu_work_probe <layout.json> <codec: block_top_k | maxmin4 | dense> <ranks> <homes> [steps]
//
// homes: 0 parameters and gradients in the trainer's memory; 1 parameters in the pipeline's
// buffers; 2 both (on trees that have them; older trees measure 0).
#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

namespace {

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Sets the homes asked for as far as the tree offers them (older trees have neither field);
// returns the homes set.
template <class Options>
int set_homes(Options& o, int homes) {
  int set = 0;
  if constexpr (requires { o.parameters; })
    if (homes >= 1) {
      o.parameters = decltype(o.parameters)::pipeline;
      set = 1;
    }
  if constexpr (requires { o.gradients; })
    if (homes >= 2) {
      o.gradients = decltype(o.gradients)::pipeline;
      set = 2;
    }
  return set;
}

// One step: the gradients handed in from the trainer's memory, or by index from the pipeline's
// buffers (written once: a GPU's device-to-host copy, not CPU work).
template <class P>
void one_step(P& pipe, std::vector<std::span<float const>> const& grads, bool owned, bool fill) {
  if constexpr (requires { pipe.gradients(); }) {
    if (owned) {
      auto const into = pipe.gradients();
      if (fill)
        for (std::size_t k = 0; k < grads.size(); ++k) std::copy(grads[k].begin(), grads[k].end(), into[k].begin());
      for (std::size_t k = grads.size(); k-- > 0;) pipe.gradient_ready(k);
      pipe.step();
      return;
    }
  }
  pipe.step(grads);
}

template <class C, class F>
double cpu_work(C codec, F feedback, sluice::layout const& l, int ranks, int& homes, int steps) {
  auto eps = sluice::local_transport::create(ranks);
  double c0 = 0, c1 = 0;
  std::barrier start(ranks, [&]() noexcept { c0 = process_cpu_seconds(); });
  std::barrier stop(ranks, [&]() noexcept { c1 = process_cpu_seconds(); });
  std::vector<std::thread> threads;
  sluice::pipeline_options probe;
  homes = set_homes(probe, homes);
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      cpu_set_t set;  // this rank, and the stage threads it starts (they inherit it), on core r
      CPU_ZERO(&set);
      CPU_SET(r, &set);
      ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
      std::vector<std::vector<float>> p, g;
      unsigned x = 12345u + static_cast<unsigned>(r);
      auto next = [&] { return static_cast<float>((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f; };
      for (auto const& t : l.tensors()) {
        p.emplace_back(t.elements());
        g.emplace_back(t.elements());
        std::generate(p.back().begin(), p.back().end(), next);
        std::generate(g.back().begin(), g.back().end(), next);
      }
      std::vector<std::span<float>> ps(p.begin(), p.end());
      std::vector<std::span<float const>> gs(g.begin(), g.end());
      sluice::pipeline_options o{.seed = 1, .kernel_threads = 1};
      set_homes(o, homes);
      sluice::pipeline pipe{codec, feedback, sluice::adam{.lr = 1e-3}, eps[static_cast<std::size_t>(r)], o};
      pipe.attach(l, ps);
      bool const owned = homes >= 2;
      one_step(pipe, gs, owned, true);  // warm-up
      start.arrive_and_wait();
      for (int s = 0; s < steps; ++s) one_step(pipe, gs, owned, false);
      stop.arrive_and_wait();
    });
  for (auto& t : threads) t.join();
  return (c1 - c0) / steps / ranks;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <layout.json> <block_top_k|maxmin4|dense> <ranks> <homes> [steps]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  auto const j = nlohmann::json::parse(in);
  sluice::layout l;
  for (auto const& t : j.at("layout"))
    l.add(t.at("name").get<std::string>(), t.at("shape").get<std::vector<std::size_t>>());
  std::string const codec = argv[2];
  int const ranks = std::atoi(argv[3]), steps = argc > 5 ? std::atoi(argv[5]) : 8;
  int homes = std::atoi(argv[4]);  // becomes the homes the tree offers
  double w = 0;
  if (codec == "block_top_k")
    w = cpu_work(sluice::block_top_k{.ratio = 0.01}, sluice::residual{}, l, ranks, homes, steps);
  else if (codec == "maxmin4")
    w = cpu_work(sluice::maxmin_quantize{.bits = 4}, sluice::residual{}, l, ranks, homes, steps);
  else
    w = cpu_work(sluice::identity{}, sluice::no_feedback{}, l, ranks, homes, steps);
  std::printf("%s ranks=%d homes=%d cpu_work_ms=%.2f\n", codec.c_str(), ranks, homes, w * 1e3);
}
