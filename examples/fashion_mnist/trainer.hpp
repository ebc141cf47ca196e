// The data-parallel trainer of the Fashion-MNIST example: every worker holds a replica of the
// MLP, trains on its shard of the training set, and hands its gradients to a sluice::pipeline,
// which compresses them (codec + error feedback), exchanges them with the other workers and
// applies the optimizer to the parameters. Every worker evaluates the replica on the whole test
// set at the same steps (replicas are bit-identical), so all of them take the same decision to
// stop at the target accuracy without another message.
//
// The codec, feedback and optimizer are chosen at run time but sluice::pipeline is a compile-time
// assembly: train() is a template, and train_codec<C> (one translation unit per codec, see
// CMakeLists.txt) dispatches the feedback and optimizer choices with std::visit.
#pragma once

#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sluice/compress/all.hpp>
#include <sluice/feedback/all.hpp>
#include <sluice/optim/all.hpp>
#include <sluice/pipeline/all.hpp>
#include <sluice/solver/cost_model.hpp>
#include <sluice/solver/solve.hpp>

#include "idx.hpp"
#include "mlp.hpp"
#include "transport.hpp"

namespace fashion_mnist {

/// Everything the command line chooses about one training job (the same on every worker).
struct train_options {
  std::string codec = "block_top_k";  ///< identity, top_k, block_top_k, maxmin_quantize, random_k, qsgd, sign
  double ratio = 0.01;                ///< top_k, block_top_k, random_k: fraction of elements kept
  unsigned bits = 4;                  ///< maxmin_quantize: bits per element; qsgd: 2^(bits-1) - 1 levels
  std::string feedback = "residual";  ///< none, residual, ef21, momentum_correction (top_k, block_top_k; sgd)
  std::string exchange = "codec";  ///< codec: the codec's collective; mpi_allreduce; hierarchical, hierarchical_gather
  int group_size = 0;              ///< hierarchical: ranks per group; 0: LOCAL_WORLD_SIZE
  std::vector<std::size_t>
      batches{};              ///< per-worker batch sizes (heterogeneous workers); empty: `batch` on every worker
  bool plan_batches = false;  ///< measure every worker's compute and split `batch` x workers with allocate_batches
  int slow_rank = -1;         ///< this rank computes `slow_factor` times slower (a stand-in for a slower GPU)
  double slow_factor = 1.0;
  double device_us_per_image = 0;  ///< an emulated accelerator: each pass also waits this long per image, off the CPU
  std::string optimizer = "adam";  ///< sgd, adam, adamw
  double lr = 1e-3;
  double momentum = 0.9;       ///< sgd; with momentum_correction the feedback's (the optimizer then has none)
  unsigned warmup_epochs = 0;  ///< DGC's warm-up: the kept fraction ramps from 25 % down over these epochs
  unsigned staleness = 1;
  std::string compensation = "local_step";  ///< none, weight_prediction, local_step (sluice::compensation_method)
  std::size_t batch = 64;                   ///< per worker
  unsigned epochs = 5;
  double target_accuracy = 0;  ///< stop at the first evaluation reaching it; 0: train every epoch
  std::uint64_t seed = 1;
  std::vector<std::size_t> sizes{784, 256, 128, 10};
  std::size_t eval_every = 0;  ///< evaluate every this many steps; 0: at the end of each epoch
  bool progress = true;        ///< rank 0 prints a progress line at every evaluation
};

/// The two splits, loaded once and shared (read-only) by the workers.
struct data {
  dataset train, test;
};

/// One evaluation.
struct eval_point {
  unsigned epoch = 0;
  std::uint64_t step = 0;
  double seconds = 0;  ///< training time so far (evaluations excluded)
  double loss = 0;     ///< mean training loss on this worker's batches since the previous evaluation
  double accuracy = 0;
  std::size_t sent_bytes = 0;
};

/// What one worker did.
struct train_result {
  int rank = 0, workers = 1;
  double accuracy = 0;               ///< test accuracy at the last evaluation
  double wall_seconds = 0;           ///< from attach to the end, evaluations included
  double train_seconds = 0;          ///< the same without the evaluations
  double time_to_target = -1;        ///< train_seconds when the target was first reached; -1: not reached
  std::uint64_t steps = 0;           ///< optimizer steps
  std::size_t sent_bytes = 0;        ///< bytes this worker put on the wire
  std::size_t dense_bytes = 0;       ///< bytes dense fp32 gradients would have been, per step summed
  unsigned epochs = 0;               ///< epochs started
  std::vector<eval_point> curve;     ///< every evaluation
  std::vector<std::size_t> batches;  ///< per-worker batch sizes (--batch-sizes or --plan-batches); empty: equal
};

/// Sums what the pipeline reports it sent (a TelemetrySink).
struct bytes_sink {
  std::atomic<std::size_t> sent{0}, dense{0};
  void record(sluice::stage_sample const&) noexcept {}
  void record(sluice::step_report const& r) noexcept {
    sent.fetch_add(r.sent_bytes, std::memory_order_relaxed);
    dense.fetch_add(r.dense_bytes, std::memory_order_relaxed);
  }
};

/// The indices of worker `rank`'s shard: a contiguous slice of one seeded permutation of the
/// training set (so every shard mixes all classes). With equal batches (`batches` empty or all
/// equal) every worker's shard has the same size; with per-worker batches worker r's shard holds
/// b_r x (count / sum b) images, so that every worker has the same number of steps per epoch
/// (the steps are collective) and an epoch still visits the training set once.
inline std::vector<std::size_t> shard(std::size_t count, int rank, int workers, std::uint64_t seed,
                                      std::span<std::size_t const> batches = {}) {
  std::vector<std::size_t> all(count);
  std::iota(all.begin(), all.end(), std::size_t{0});
  for (std::size_t i = count; i > 1; --i) std::swap(all[i - 1], all[mix(seed ^ 0x5eed ^ (i << 1)) % i]);
  auto const r = static_cast<std::size_t>(rank);
  std::size_t first = 0, size = count / static_cast<std::size_t>(workers);
  if (!batches.empty() && std::adjacent_find(batches.begin(), batches.end(), std::not_equal_to<>{}) != batches.end()) {
    std::size_t const global = std::accumulate(batches.begin(), batches.end(), std::size_t{0});
    std::size_t const steps = count / global;
    first = steps * std::accumulate(batches.begin(), batches.begin() + static_cast<std::ptrdiff_t>(r), std::size_t{0});
    size = steps * batches[r];
  } else {
    first = size * r;
  }
  auto const begin = all.begin() + static_cast<std::ptrdiff_t>(first);
  return {begin, begin + static_cast<std::ptrdiff_t>(size)};
}

/// This thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID).
inline double thread_cpu_seconds() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Seconds of one forward/backward pass over b images on this worker: the fastest of `reps`
/// passes in thread CPU time (on a shared machine wall time would time the neighbours' load too),
/// plus the emulated device time, times `slow_factor` on the --slow-rank worker (the delay the
/// training loop adds).
/// Each pass's --device-us-per-image wait counts as requested.
inline double time_batches(mlp& net, dataset const& train, std::size_t b, int reps, bool slow, train_options const& o) {
  std::vector<std::size_t> idx(b);
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::vector<double> t;
  double const device = o.device_us_per_image * 1e-6 * static_cast<double>(b);
  for (int i = 0; i < reps; ++i) {
    double const c0 = thread_cpu_seconds();
    (void)net.train_batch(train, idx);
    t.push_back((thread_cpu_seconds() - c0 + device) * (slow ? o.slow_factor : 1.0));
  }
  return *std::min_element(t.begin(), t.end());  // the least disturbed by neighbours sharing caches
}

/// --plan-batches: every worker times its forward/backward at three batch sizes around `batch`
/// (sluice::compute_samples), the workers exchange their fits (every worker sends its two doubles
/// to every other) and each computes sluice::allocate_batches over the same fits in rank order,
/// so all agree on the split of batch x workers that equalises the workers' compute times.
/// Returns the fits (rank order) and the batches.
struct batch_plan {
  std::vector<sluice::compute_fit> fits;
  std::vector<std::size_t> batches;
};
inline batch_plan plan_batches(any_transport& t, mlp& net, dataset const& train, train_options const& o) {
  int const rank = t.rank(), workers = t.size();
  bool const slow = rank == o.slow_rank;
  sluice::compute_samples samples;
  (void)time_batches(net, train, o.batch, 5, slow, o);  // warm the caches and allocations
  for (int round = 0; round < 3; ++round)
    for (std::size_t b : {std::max<std::size_t>(o.batch / 2, 1), o.batch, o.batch + o.batch / 2})
      samples.observe(b, time_batches(net, train, b, 9, slow, o));
  sluice::compute_fit const mine = samples.fit();
  sluice::message_tag const tag{sluice::tag_limit - 100};  // before the pipeline exists; outside its tags
  std::array<double, 2> const out{mine.fixed_seconds, mine.per_sample_seconds};
  std::vector<any_transport::request> sends;
  for (int p = 0; p < workers; ++p)
    if (p != rank) sends.push_back(t.send(p, tag, std::as_bytes(std::span<double const>(out))));
  batch_plan bp;
  std::vector<sluice::worker_desc> desc;
  std::vector<std::byte> buffer;
  auto const limit = sluice::deadline::after(std::chrono::seconds(120));
  for (int p = 0; p < workers; ++p) {
    sluice::compute_fit f = mine;
    if (p != rank) {
      auto const got = t.recv(p, tag, buffer, limit);
      sluice::require(got.size() == sizeof out, sluice::errc::malformed_message,
                      "fashion_mnist: --plan-batches: rank {} sent {} bytes of compute fit, expected {}", p, got.size(),
                      sizeof out);
      std::array<double, 2> in{};
      std::memcpy(in.data(), got.data(), sizeof in);
      f = {in[0], in[1]};
      f.validate(static_cast<std::size_t>(p));
    }
    bp.fits.push_back(f);
    desc.push_back({.compute = f});
  }
  for (auto& s : sends) s.wait(limit);
  bp.batches = sluice::allocate_batches(desc, o.batch * static_cast<std::size_t>(workers));
  sluice::require(!bp.batches.empty(), sluice::errc::invalid_argument,
                  "fashion_mnist: --plan-batches cannot split {} images over {} workers; raise --batch",
                  o.batch * static_cast<std::size_t>(workers), workers);
  return bp;
}

/// The compensation_method named on the command line.
inline sluice::compensation_method compensation_of(std::string_view name) {
  if (name == "none") return sluice::compensation_method::none;
  if (name == "weight_prediction") return sluice::compensation_method::weight_prediction;
  return sluice::compensation_method::local_step;
}

/// Trains one worker to the end (all epochs, or the target accuracy) through a pipeline of the
/// given policies; call it on every worker with the same options.
template <class C, class F, class O, class Collective = sluice::by_codec>
train_result train(C codec, F feedback, O optimizer, any_transport transport, data const& d, train_options const& o,
                   Collective collective = {}) {
  using clock = std::chrono::steady_clock;
  train_result res;
  res.rank = transport.rank();
  res.workers = transport.size();
  mlp net(o.sizes, o.seed);
  std::vector<std::size_t> batches = o.batches;  // per worker; empty: `batch` on every worker
  if (o.plan_batches) {
    batch_plan const bp = plan_batches(transport, net, d.train, o);
    batches = bp.batches;
    if (o.progress && res.rank == 0) {
      for (std::size_t r = 0; r < bp.fits.size(); ++r)
        fmt::print("plan-batches: rank {} computes {:.3f} ms + {:.4f} ms per image\n", r,
                   bp.fits[r].fixed_seconds * 1e3, bp.fits[r].per_sample_seconds * 1e3);
      fmt::print("plan-batches: --batch-sizes {}\n", fmt::join(batches, " "));
    }
  }
  res.batches = batches;
  bytes_sink sink;
  sluice::pipeline pipe{std::move(codec),
                        std::move(feedback),
                        std::move(optimizer),
                        std::move(transport),
                        sluice::pipeline_options{.staleness = o.staleness,
                                                 .seed = o.seed,
                                                 .kernel_threads = 1,
                                                 .compensation = {.method = compensation_of(o.compensation)}},
                        collective};
  pipe.set_telemetry(sink);
  auto const params = net.parameters();
  pipe.attach(net.layout(), params);
  std::size_t batch = o.batch;  // this worker's; with --batch-sizes, weighted averaging sum b_r g_r / sum b
  if (!batches.empty()) {
    sluice::require(batches.size() == static_cast<std::size_t>(res.workers), sluice::errc::invalid_argument,
                    "fashion_mnist: --batch-sizes gives {} sizes for {} workers; give one per worker", batches.size(),
                    res.workers);
    pipe.set_batch_sizes(batches);
    batch = batches[static_cast<std::size_t>(res.rank)];
  }

  std::vector<std::size_t> mine = shard(d.train.count, res.rank, res.workers, o.seed, batches);
  std::size_t const steps_per_epoch = mine.size() / batch;
  sluice::require(steps_per_epoch > 0, sluice::errc::invalid_argument,
                  "fashion_mnist: a shard of {} images holds no batch of {}; use fewer workers or a smaller --batch",
                  mine.size(), batch);
  std::size_t const eval_every = o.eval_every > 0 ? o.eval_every : steps_per_epoch;
  // DGC's warm-up: the codec's strength ramps geometrically from its warm start (25 % kept for the
  // top-k family) to its own value, one stage per epoch; set before each step of the ramp.
  sluice::warmup const ramp{.steps = o.warmup_epochs * steps_per_epoch, .stages = o.warmup_epochs};
  C const target = pipe.codec();
  if constexpr (!sluice::WarmableCodec<C>)
    sluice::require(ramp.steps == 0, sluice::errc::unsupported,
                    "--warmup-epochs {}: codec {} has no strength to ramp; use top_k, block_top_k or random_k",
                    o.warmup_epochs, o.codec);

  auto const start = clock::now();
  double eval_seconds = 0, loss_sum = 0;
  std::size_t loss_count = 0;
  bool done = false;
  for (unsigned epoch = 0; epoch < o.epochs && !done; ++epoch) {
    res.epochs = epoch + 1;
    // A fresh order of this worker's shard every epoch, from (seed, rank, epoch).
    std::uint64_t const key = mix(o.seed ^ mix(static_cast<std::uint64_t>(res.rank) << 32 | epoch));
    for (std::size_t i = mine.size(); i > 1; --i) std::swap(mine[i - 1], mine[mix(key + i) % i]);
    for (std::size_t s = 0; s < steps_per_epoch && !done; ++s) {
      auto const c0 = clock::now();
      loss_sum += net.train_batch(d.train, std::span<std::size_t const>(mine).subspan(s * batch, batch));
      // An emulated accelerator's time (off the CPU), then a slower GPU: slow_factor times as long.
      std::chrono::duration<double> wait(o.device_us_per_image * 1e-6 * static_cast<double>(batch));
      if (res.rank == o.slow_rank) wait = (clock::now() - c0 + wait) * o.slow_factor - (clock::now() - c0);
      if (wait.count() > 0) std::this_thread::sleep_for(wait);
      ++loss_count;
      if constexpr (sluice::WarmableCodec<C>)
        if (res.steps <= ramp.steps && ramp.steps > 0) pipe.set_codec(ramp.apply(target, res.steps));
      pipe.step(net.gradients());
      ++res.steps;
      bool const last = epoch + 1 == o.epochs && s + 1 == steps_per_epoch;
      if (res.steps % eval_every != 0 && !last) continue;
      pipe.synchronize();
      auto const e0 = clock::now();
      double const acc = net.accuracy(d.test);
      eval_seconds += std::chrono::duration<double>(clock::now() - e0).count();
      double const trained = std::chrono::duration<double>(clock::now() - start).count() - eval_seconds;
      eval_point const p{epoch + 1, res.steps,       trained, loss_sum / static_cast<double>(loss_count),
                         acc,       sink.sent.load()};
      res.curve.push_back(p);
      loss_sum = 0;
      loss_count = 0;
      if (o.target_accuracy > 0 && acc >= o.target_accuracy) {
        res.time_to_target = trained;
        done = true;
      }
      if (o.progress && res.rank == 0) {
        fmt::print(
            "epoch {:>2}  step {:>6}  loss {:.4f}  test accuracy {:.4f}  sent {:8.2f} MB  {:7.2f} MB/s  {:6.1f} s\n",
            p.epoch, p.step, p.loss, p.accuracy, static_cast<double>(p.sent_bytes) / 1e6,
            static_cast<double>(p.sent_bytes) / 1e6 / std::max(trained, 1e-9), trained);
        std::fflush(stdout);
      }
    }
  }
  pipe.synchronize();
  res.wall_seconds = std::chrono::duration<double>(clock::now() - start).count();
  res.train_seconds = res.wall_seconds - eval_seconds;
  res.accuracy = res.curve.empty() ? 0 : res.curve.back().accuracy;
  res.sent_bytes = sink.sent.load();
  res.dense_bytes = sink.dense.load();
  return res;
}

/// The feedback and optimizer choices compiled in. Each pair is one more pipeline per codec
/// (several seconds of compile time each), so ef21 and adamw are built only with
/// -DFASHION_MNIST_ALL_POLICIES=ON.
/// momentum_correction (DGC) is compiled for top_k and block_top_k only.
#if FASHION_MNIST_ALL_POLICIES
using feedback_choice = std::variant<sluice::no_feedback, sluice::residual, sluice::momentum_correction, sluice::ef21>;
using optimizer_choice = std::variant<sluice::sgd, sluice::adam, sluice::adamw>;
#else
using feedback_choice = std::variant<sluice::no_feedback, sluice::residual, sluice::momentum_correction>;
using optimizer_choice = std::variant<sluice::sgd, sluice::adam>;
#endif

inline feedback_choice make_feedback(train_options const& o) {
  if (o.feedback == "none") return sluice::no_feedback{};
  if (o.feedback == "residual") return sluice::residual{};
  if (o.feedback == "momentum_correction") return sluice::momentum_correction{.momentum = o.momentum};
#if FASHION_MNIST_ALL_POLICIES
  if (o.feedback == "ef21") return sluice::ef21{};
#else
  sluice::require(o.feedback != "ef21", sluice::errc::unsupported,
                  "--feedback ef21 is not compiled into this build; reconfigure with -DFASHION_MNIST_ALL_POLICIES=ON");
#endif
  sluice::throw_error(sluice::errc::invalid_argument,
                      "--feedback {}: choose none, residual, momentum_correction or ef21", o.feedback);
}
inline optimizer_choice make_optimizer(train_options const& o) {
  // DGC: with momentum_correction the momentum is the feedback's, and the optimizer has none.
  if (o.optimizer == "sgd")
    return sluice::sgd{.lr = o.lr, .momentum = o.feedback == "momentum_correction" ? 0.0 : o.momentum};
  if (o.optimizer == "adam") return sluice::adam{.lr = o.lr};
#if FASHION_MNIST_ALL_POLICIES
  if (o.optimizer == "adamw") return sluice::adamw{.lr = o.lr};
#else
  sluice::require(
      o.optimizer != "adamw", sluice::errc::unsupported,
      "--optimizer adamw is not compiled into this build; reconfigure with -DFASHION_MNIST_ALL_POLICIES=ON");
#endif
  sluice::throw_error(sluice::errc::invalid_argument, "--optimizer {}: choose sgd, adam or adamw", o.optimizer);
}

/// qsgd's elements per norm: its default, or with error feedback at most qsgd::feedback_bucket, so
/// that the residual shrinks (the pipeline refuses the default 512 there at 7 levels: variance
/// bound 3.2); 24 for --bits 4, the default 512 for --bits 8.
inline std::size_t qsgd_bucket(unsigned levels, std::string_view feedback) {
  std::size_t const plain = sluice::qsgd{}.bucket;
  return feedback == "none" ? plain : std::min(plain, sluice::qsgd::feedback_bucket(levels));
}

/// The codec value the options describe.
template <class C>
C make_codec(train_options const& o) {
  if constexpr (std::is_same_v<C, sluice::top_k> || std::is_same_v<C, sluice::block_top_k> ||
                std::is_same_v<C, sluice::random_k>) {
    return C{.ratio = o.ratio};
  } else if constexpr (std::is_same_v<C, sluice::maxmin_quantize>) {
    return C{.bits = o.bits};
  } else if constexpr (std::is_same_v<C, sluice::qsgd>) {
    sluice::require(o.bits >= 2 && o.bits <= 8, sluice::errc::invalid_argument,
                    "--bits {} for qsgd: use 2 to 8 (one sign bit, 2^(bits-1) - 1 levels)", o.bits);
    unsigned const levels = (1u << (o.bits - 1)) - 1;
    return C{.levels = levels, .bucket = qsgd_bucket(levels, o.feedback)};
  } else {
    return C{};
  }
}

/// train() for codec C with the feedback and optimizer the options name.
template <class C>
train_result train_codec(C codec, any_transport transport, data const& d, train_options const& o) {
  return std::visit(
      [&]<class F, class O>(F feedback, O optimizer) -> train_result {
        constexpr bool dgc = std::is_same_v<F, sluice::momentum_correction>;
        if constexpr (std::is_same_v<C, sluice::identity> && !std::is_same_v<F, sluice::no_feedback>) {
          sluice::throw_error(sluice::errc::invalid_argument,
                              "--codec identity sends gradients exactly: error feedback has nothing to compensate; "
                              "use --feedback none");
        } else if constexpr (dgc && !std::is_same_v<C, sluice::top_k> && !std::is_same_v<C, sluice::block_top_k>) {
          sluice::throw_error(sluice::errc::unsupported,
                              "--feedback momentum_correction is compiled for --codec top_k and block_top_k (DGC's "
                              "codecs); use --feedback residual with --codec {}",
                              o.codec);
        } else if constexpr (dgc && !std::is_same_v<O, sluice::sgd>) {
          sluice::throw_error(
              sluice::errc::unsupported,
              "--feedback momentum_correction keeps DGC's momentum, so the optimizer must keep none: "
              "use --optimizer sgd (it runs without momentum), or --feedback residual with --optimizer {}",
              o.optimizer);
        } else if (o.exchange == "hierarchical" || o.exchange == "hierarchical_gather") {
#if FASHION_MNIST_HIERARCHICAL
          // Two tiers (groups on a fast path, leaders on the thin link): one more pipeline, with Adam.
          if constexpr (std::is_same_v<O, sluice::adam> && !dgc) {
            sluice::require(o.exchange == "hierarchical" || sluice::codec_traits<C>::is_sparse,
                            sluice::errc::invalid_argument,
                            "--exchange hierarchical_gather gathers sparse frames: use --codec top_k, block_top_k "
                            "or random_k, or --exchange hierarchical");
            return train(std::move(codec), feedback, optimizer, std::move(transport), d, o,
                         sluice::by_hierarchical{.group_size = o.group_size,
                                                 .sparse = o.exchange == "hierarchical"
                                                               ? sluice::hierarchical_sparse::sum_on_leader
                                                               : sluice::hierarchical_sparse::gather_frames});
          } else
            sluice::throw_error(sluice::errc::unsupported,
                                "--exchange hierarchical is compiled with --optimizer adam and --feedback none or "
                                "residual only (one more pipeline)");
#else
          sluice::throw_error(sluice::errc::unsupported,
                              "--exchange hierarchical is not compiled into this build; reconfigure with "
                              "-DFASHION_MNIST_HIERARCHICAL=ON");
#endif
        } else if constexpr (std::is_same_v<C, sluice::identity>) {
          // Dense training through MPI_Allreduce, the DDP-equivalent baseline: one more pipeline, with Adam.
          if (o.exchange != "mpi_allreduce")
            return train(std::move(codec), feedback, optimizer, std::move(transport), d, o);
          if constexpr (std::is_same_v<O, sluice::adam>)
            return train(std::move(codec), feedback, optimizer, std::move(transport), d, o, sluice::by_mpi_allreduce{});
          else
            sluice::throw_error(sluice::errc::unsupported,
                                "--exchange mpi_allreduce is compiled with --optimizer adam only (one more pipeline)");
        } else {
          return train(std::move(codec), feedback, optimizer, std::move(transport), d, o);
        }
      },
      make_feedback(o), make_optimizer(o));
}

// One function per codec, each defined in its own translation unit (codec.cpp.in), so the build
// compiles them in parallel: train_codec(make_codec<sluice::NAME>(o), ...).
train_result train_identity(any_transport t, data const& d, train_options const& o);
train_result train_top_k(any_transport t, data const& d, train_options const& o);
train_result train_block_top_k(any_transport t, data const& d, train_options const& o);
train_result train_random_k(any_transport t, data const& d, train_options const& o);
train_result train_maxmin_quantize(any_transport t, data const& d, train_options const& o);
train_result train_qsgd(any_transport t, data const& d, train_options const& o);
train_result train_sign(any_transport t, data const& d, train_options const& o);

/// Trains one worker with the codec the options name (needs the codec translation units; CMake's
/// FASHION_MNIST_CODECS chooses which are built and defines FASHION_MNIST_CODEC_<name> for each).
inline train_result train_any([[maybe_unused]] any_transport t, [[maybe_unused]] data const& d,
                              train_options const& o) {
  sluice::require(o.exchange != "mpi_allreduce" || (o.codec == "identity" && o.feedback == "none"),
                  sluice::errc::invalid_argument,
                  "--exchange mpi_allreduce sums fp32 gradients: use --codec identity --feedback none");
#if FASHION_MNIST_CODEC_identity
  if (o.codec == "identity") return train_identity(std::move(t), d, o);
#endif
#if FASHION_MNIST_CODEC_top_k
  if (o.codec == "top_k") return train_top_k(std::move(t), d, o);
#endif
#if FASHION_MNIST_CODEC_block_top_k
  if (o.codec == "block_top_k") return train_block_top_k(std::move(t), d, o);
#endif
#if FASHION_MNIST_CODEC_random_k
  if (o.codec == "random_k") return train_random_k(std::move(t), d, o);
#endif
#if FASHION_MNIST_CODEC_maxmin_quantize
  if (o.codec == "maxmin_quantize") return train_maxmin_quantize(std::move(t), d, o);
#endif
#if FASHION_MNIST_CODEC_qsgd
  if (o.codec == "qsgd") return train_qsgd(std::move(t), d, o);
#endif
#if FASHION_MNIST_CODEC_sign
  if (o.codec == "sign") return train_sign(std::move(t), d, o);
#endif
  for (std::string_view known : {"identity", "top_k", "block_top_k", "random_k", "maxmin_quantize", "qsgd", "sign"})
    sluice::require(o.codec != known, sluice::errc::unsupported,
                    "--codec {} is not compiled into this build; reconfigure with -DFASHION_MNIST_CODECS=\"...;{}\"",
                    o.codec, o.codec);
  sluice::throw_error(sluice::errc::invalid_argument,
                      "--codec {}: choose identity, top_k, block_top_k, maxmin_quantize, random_k, qsgd or sign",
                      o.codec);
}

}  // namespace fashion_mnist
