// The C++ blocks of docs/*.md that run on one machine, compiled and run: each page's block is the
// region between `// example-begin <name>` and `// example-end <name>` below, and test_docs checks
// that the page shows exactly that region (docs/<page>.md, `<!-- example: tests/docs/docs_blocks.cpp
// <name> -->`). Each test case sets up what its block assumes (a gradient, a transport, a layout)
// and checks what the page says the block does.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <sluice/collective/replica_check.hpp>
#include <sluice/compress/all.hpp>
#include <sluice/feedback/all.hpp>
#include <sluice/optim/all.hpp>
#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>
#include <sluice/solver/all.hpp>
#include <sluice/transport/fault.hpp>

#include "support/local_world.hpp"

using namespace std::chrono_literals;

namespace {

std::vector<float> ramp(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 37) % 101) * 0.01f - 0.5f;
  return v;
}

}  // namespace

TEST_CASE("docs/bucketing.md: a layout and a bucket plan") {
  std::vector<float> w(300), b(20);
  std::vector<std::pair<std::string, std::span<float>>> const named_spans{{"w", w}, {"b", b}};
  // example-begin layout
  sluice::layout l;
  l.add("conv1.weight", {64, 3, 7, 7})
      .add("conv1.bias", {64})
      .add("fc.weight", {1000, 2048}, sluice::element_type::bf16);
  auto l2 = sluice::layout::from(named_spans);  // (name, std::span<T>) pairs: 1-D shapes, T's element type
  // example-end layout
  CHECK(l.size() == 3);
  CHECK(l2.size() == 2);
}

TEST_CASE("docs/bucketing.md: encoding a plan's chunks") {
  sluice::layout l;
  l.add("fc1.weight", {256, 64}).add("fc1.bias", {256}).add("fc2.weight", {10, 256});
  sluice::residual const fb{};
  sluice::top_k const codec{.ratio = 0.01};
  sluice::feedback_state state(fb, l.extents());
  std::vector<std::vector<float>> grads;
  for (std::size_t t = 0; t < l.size(); ++t) grads.push_back(ramp(l.extents()[t]));
  std::vector<std::span<float const>> grad(grads.begin(), grads.end());
  sluice::feedback_workspace<sluice::top_k, float> ws;
  std::vector<std::byte> out(codec.max_encoded_bytes(l.total_elements()));
  std::size_t bytes = 0;
  // example-begin plan
  sluice::bucket_plan plan(l, {.cap_bytes = 25 << 20, .first_cap_bytes = 1 << 20});
  for (sluice::bucket const& b : plan.buckets())
    for (sluice::chunk const& c : plan.chunks_of(b))  // {tensor, offset, count}
      bytes += fb.encode(codec, state.slice(c.tensor, c.offset, c.count), grad[c.tensor].subspan(c.offset, c.count),
                         {.step = 0, .tensor = c.tensor}, ws, out);
  // example-end plan
  CHECK(bytes > 0);
}

TEST_CASE("docs/collective.md: the calling convention") {
  std::vector<float> const grad = ramp(4096);
  std::vector<std::vector<float>> sums(2);
  sluice::test::rethrow_first(sluice::test::run_local(2, [&](sluice::local_transport& transport) {
    std::uint64_t const step = 3, id = 1, seed = 7;
    using sluice::message_tag;
    auto& out = sums[static_cast<std::size_t>(transport.rank())];
    out.resize(grad.size());
    // example-begin convention
    sluice::collective_context ctx{.step = step, .tensor = id, .seed = seed, .timeout = 30s, .tag = message_tag{0}};
    sluice::scatter_reduce_allgather_workspace<sluice::maxmin_quantize> ws;  // one per tensor (and per concurrent call)
    sluice::scatter_reduce_allgather(transport, sluice::maxmin_quantize{.bits = 4}, grad, out, ctx, ws);
    // example-end convention
  }));
  CHECK(sums[0] == sums[1]);  // every rank ends with the same bits
  CHECK(sums[0][5] == doctest::Approx(2 * grad[5]).epsilon(0.1));
}

TEST_CASE("docs/collective.md: checking replicas") {
  std::vector<int> agree(2), differ(2);
  sluice::test::rethrow_first(sluice::test::run_local(2, [&](sluice::local_transport& transport) {
    std::vector<float> w(64, 1.0f);
    std::vector<std::span<float const>> const params{w};
    sluice::local_transport& check_transport = transport;
    std::uint64_t const step = 40, steps = 300;
    // example-begin replicas
    sluice::replica_report const r = sluice::check_replicas(transport, params, {.step = step});
    if (!r.agree) std::puts(r.describe().c_str());  // step 40: rank(s) 2 hold parameters that differ ...

    sluice::replica_monitor monitor(100);  // every 100 steps
    for (std::uint64_t t = 1; t <= steps; ++t) {
      /* ... pipe.step(grads) ... */
      monitor.step(check_transport, t, params);  // collective on steps 100, 200, ...
      if (monitor.first_difference()) break;     // they diverged after last_agreement()
    }
    // example-end replicas
    agree[static_cast<std::size_t>(transport.rank())] = r.agree;
    differ[static_cast<std::size_t>(transport.rank())] = monitor.first_difference().has_value();
  }));
  CHECK(agree == std::vector<int>{1, 1});
  CHECK(differ == std::vector<int>{0, 0});
}

TEST_CASE("docs/compress.md: encode, decode, decode_add, decode_sparse") {
  std::vector<float> const grad = ramp(10000);
  std::vector<float> dense(grad.size()), sum(grad.size(), 1.0f);
  sluice::encode_context const ctx{.seed = 1, .step = 2};
  // example-begin codec
  sluice::top_k const codec{.ratio = 0.01};
  sluice::codec_workspace<sluice::top_k, float> ws;  // per tensor, reused every step
  std::vector<std::byte> out(codec.max_encoded_bytes(grad.size()));
  std::size_t const bytes = codec.encode(std::span<float const>(grad), ctx, ws, out);
  sluice::decode(codec, std::span(out).first(bytes), ctx, ws, std::span(dense));    // overwrite
  sluice::decode_add(codec, std::span(out).first(bytes), ctx, ws, std::span(sum));  // aggregate
  sluice::sparse_buffer<float> sparse;                                              // sparse codecs only
  codec.decode_sparse(std::span(out).first(bytes), ctx, ws, sparse);
  // example-end codec
  CHECK(sparse.view().nnz() == 100);
  for (std::size_t i = 0; i < grad.size(); ++i) CHECK(sum[i] == 1.0f + dense[i]);
}

TEST_CASE("docs/feedback.md: residual feedback with a warm-up") {
  sluice::layout l;
  l.add("fc.weight", {128, 64});
  std::uint64_t const steps_per_epoch = 10, step = 3, s = 7;
  std::uint32_t const r = 0;
  std::size_t const t = 0, n = l.extents()[t];
  std::vector<float> const grad_values = ramp(n);
  std::span<float const> const grad(grad_values);
  // example-begin feedback
  sluice::residual const fb{.precision = sluice::element_type::f32};
  sluice::block_top_k const codec{.ratio = 0.01};
  sluice::feedback_state state(fb, l.extents(), l.names());
  state.set_warmup({.steps = 4 * steps_per_epoch, .start = 0.25, .stages = 4});  // DGC's ramp

  sluice::feedback_workspace<sluice::block_top_k, float> ws;  // one per (tensor, thread)
  std::vector<std::byte> out(state.warmup().peak(codec).max_encoded_bytes(n));
  std::size_t bytes = fb.encode(codec, state.slice(t), grad, {.seed = s, .rank = r, .step = step, .tensor = t}, ws,
                                out);  // 0: skipped (skip_step)
  // example-end feedback
  CHECK(bytes > 0);
}

TEST_CASE("docs/optim.md: the steps of an optimizer") {
  std::vector<float> params_values(64, 1.0f), grad_values(64, 0.5f);
  std::span<float> const params(params_values);
  std::span<float const> const grad(grad_values);
  std::vector<std::uint32_t> const idx{3, 9};
  std::vector<float> const val{0.25f, -0.25f};
  sluice::sparse_view<float const> const sparse_grad{idx, val, 64};
  std::vector<sluice::bfloat16> bf16_shadow(64);
  // example-begin optimizer
  sluice::adam const opt{.lr = 1e-3, .sparse = sluice::sparse_mode::lazy};
  sluice::optimizer_state<sluice::adam> state(opt, params.size(), /*tensor id*/ 7);

  sluice::step(opt, state, params, grad);                          // dense: a tensor or a fused bucket
  sluice::step(opt, state, params, sparse_grad);                   // sparse_view: element or block indices
  sluice::step(opt, state, params, grad, std::span(bf16_shadow));  // + bf16 copy for the GPU, same pass
  sluice::flush(opt, state, params);                               // catch_up: bring every entry up to date
  auto bytes = state.save();                                       /* ... */
  state.restore(bytes);                                            // bit-exact checkpoint
  // example-end optimizer
  CHECK(state.step() == 3);
}

TEST_CASE("docs/optim.md: the entry") {
  sluice::sgd const o{.lr = 0.1, .momentum = 0.9, .sparse = sluice::sparse_mode::catch_up};
  std::vector<float> params_values(64, 1.0f), grad_values(64, 0.5f);
  std::span<float> const params(params_values);
  std::span<float const> const grad(grad_values);
  std::vector<std::uint32_t> const idx{3, 9};
  std::vector<std::uint64_t> const idx64{3, 9};
  std::vector<float> const val{0.25f, -0.25f};
  sluice::sparse_view<float const> const sparse{idx, val, 64};
  sluice::sparse_view<float const, std::uint64_t> const sparse64{idx64, val, 64};
  std::vector<sluice::half> shadow_values(64);
  std::span<sluice::half> const shadow(shadow_values);
  sluice::optimizer_state<sluice::sgd> s(o, params.size());
  // example-begin entry
  sluice::step(o, s, params, grad);          // dense: std::span<float const>
  sluice::step(o, s, params, sparse);        // sparse_view<float const>: 32-bit indices
  sluice::step(o, s, params, sparse64);      // sparse_view<float const, std::uint64_t>
  sluice::step(o, s, params, grad, shadow);  // any of the three, plus a shadow span
  sluice::flush(o, s, params);               // catch_up: bring every entry up to date
  sluice::flush(o, s, params, shadow);       // ... and rewrite the whole shadow
  // example-end entry
  CHECK(s.step() == 4);
}

TEST_CASE("docs/transport.md: local endpoints and fault injection") {
  // example-begin local
  auto eps = sluice::local_transport::create(4);  // eps[r] is rank r; hand one to each thread
  eps[1].kill();                                  // peers waiting on rank 1 get errc::peer_lost
  // example-end local
  sluice::local_transport& inner = eps[0];
  // example-begin faulty
  sluice::faulty f(inner, {.delay = 5ms,
                           .drop_send = 3,
                           .duplicate_send = 4,
                           .corrupt_send = 0,
                           .corrupt_offset = 100,
                           .kill_at_send = 7,
                           .peer = 2});
  // example-end faulty
  CHECK(f.rank() == 0);
}

namespace {

/// A two-tensor model, its parameters and a gradient that pulls them towards `target`.
struct toy_model {
  sluice::layout layout;
  std::vector<float> w = std::vector<float>(64 * 64, 0.0f), b = std::vector<float>(64, 0.0f);
  std::vector<float> gw = std::vector<float>(64 * 64), gb = std::vector<float>(64);
  std::vector<std::span<float>> params{w, b};
  std::vector<std::span<float const>> grads{gw, gb};
  toy_model() { layout.add("w", {64, 64}).add("b", {64}); }
  void forward_and_backward(int rank = 0) {
    for (std::size_t i = 0; i < w.size(); ++i)
      gw[i] = w[i] - static_cast<float>((i + static_cast<std::size_t>(rank)) % 7);
    for (std::size_t i = 0; i < b.size(); ++i) gb[i] = b[i] - 1.0f;
  }
};

/// The toy model's backward for tensor i (w: 64 x 64, b: 64) from the weights the forward read.
void backward_into(std::size_t i, std::span<std::span<float const> const> weights, std::span<float> grad, int rank) {
  for (std::size_t k = 0; k < grad.size(); ++k)
    grad[k] =
        i == 0 ? weights[0][k] - static_cast<float>((k + static_cast<std::size_t>(rank)) % 7) : weights[1][k] - 1.0f;
}

/// One worker on a 1 Gbit/s link, the toy model, two top-k candidates: the solver blocks' problem.
sluice::problem toy_problem(toy_model const& m) {
  sluice::problem problem;
  problem.workers = {{.compute = {0.01, 0.0005}, .max_batch = 64}};
  problem.links = {{.group = 1, .bytes_per_second = 125e6, .latency_seconds = 50e-6}};
  problem.model = m.layout;
  problem.codecs = {{sluice::top_k{.ratio = 0.2}, 1e-9}, {sluice::top_k{.ratio = 0.01}, 1e-9}};
  problem.global_batches = {16};
  problem.bucket_caps = {std::size_t{25} << 20};
  problem.staleness = {1};
  return problem;
}

/// Runs f(transport) on every rank of a local world of n threads.
template <class F>
void local_world(int n, F f) {
  sluice::test::rethrow_first(sluice::test::run_local(n, f));
}

}  // namespace

TEST_CASE("docs/pipeline.md: the pipeline's loop") {
  std::vector<std::vector<float>> out(2);
  local_world(2, [&](sluice::local_transport& transport) {
    toy_model m;
    int const rank = transport.rank(), steps = 5;
    auto const& layout = m.layout;
    auto const& params = m.params;
    auto const& grads = m.grads;
    auto forward_and_backward = [&] { m.forward_and_backward(rank); };
    // example-begin pipeline
    sluice::pipeline pipe{sluice::block_top_k{.ratio = 0.01},  // codec
                          sluice::residual{},                  // error feedback
                          sluice::adam{.lr = 1e-3},            // optimizer, on fp32 master weights
                          std::move(transport),                // a local_transport endpoint (others: below)
                          sluice::pipeline_options{.staleness = 1, .bucketing = {.cap_bytes = 4 << 20}, .seed = 7}};
    pipe.attach(layout, params);  // every rank, same layout: checked across ranks
    for (int step = 0; step < steps; ++step) {
      forward_and_backward();  // the trainer
      pipe.step(grads);        // or gradient_ready(i, grad_i) per tensor, then step()
    }
    pipe.synchronize();  // the last `staleness` updates reach the parameters
    // example-end pipeline
    out[static_cast<std::size_t>(rank)] = m.w;
  });
  CHECK(out[0] == out[1]);
  CHECK(out[0] != std::vector<float>(out[0].size(), 0.0f));
}

TEST_CASE("docs/pipeline.md: two tiers and the staleness compensation") {
  std::vector<std::vector<float>> out(4);
  local_world(4, [&](sluice::local_transport& transport) {
    toy_model m;
    // example-begin hierarchical
    sluice::pipeline pipe{sluice::block_top_k{.ratio = 0.01},
                          sluice::residual{},
                          sluice::adam{.lr = 1e-3},
                          transport,
                          sluice::pipeline_options{.staleness = 1},
                          sluice::by_hierarchical{.group_size = 2}};  // 0: LOCAL_WORLD_SIZE (torchrun, sluice-run)
    // example-end hierarchical
    pipe.attach(m.layout, m.params);
    for (int step = 0; step < 3; ++step) {
      m.forward_and_backward(transport.rank());
      pipe.step(m.grads);
    }
    pipe.synchronize();
    out[static_cast<std::size_t>(transport.rank())] = m.w;
  });
  for (auto const& w : out) CHECK(w == out[0]);
  // example-begin compensation
  sluice::pipeline_options const options{
      .staleness = 1, .compensation = {.method = sluice::compensation_method::local_step}};  // the default
  // example-end compensation
  CHECK(options.compensation == sluice::pipeline_options{}.compensation);
}

TEST_CASE("docs/pipeline.md: no copy on the trainer's path") {
  std::vector<std::vector<float>> out(2), copied(2);
  local_world(2, [&](sluice::local_transport& transport) {
    toy_model m;
    int const rank = transport.rank(), steps = 4;
    auto const& layout = m.layout;
    auto const& params = m.params;
    // example-begin no-copy
    sluice::pipeline_options options{.staleness = 1};
    options.parameters = sluice::parameter_home::pipeline;  // read parameters() after each step
    options.gradients = sluice::gradient_home::pipeline;    // write into gradients() each step
    sluice::pipeline pipe{sluice::block_top_k{.ratio = 0.01}, sluice::residual{}, sluice::adam{.lr = 1e-3}, transport,
                          options};
    pipe.attach(layout, params);  // params: the initial values only
    for (int step = 0; step < steps; ++step) {
      auto const weights = pipe.parameters();  // forward reads these (tensor i: weights[i])
      auto const grads = pipe.gradients();     // backward writes here (waits until the buffer is free)
      for (std::size_t i = grads.size(); i-- > 0;) {
        backward_into(i, weights, grads[i], rank);
        pipe.gradient_ready(i);  // from here the buffer is the pipeline's
      }
      pipe.step();  // no pass over the model on this thread
    }
    pipe.synchronize();
    // example-end no-copy
    out[static_cast<std::size_t>(rank)].assign(pipe.parameters()[0].begin(), pipe.parameters()[0].end());
  });
  // The trainer's own memory gives the same parameters, bit for bit.
  local_world(2, [&](sluice::local_transport& transport) {
    toy_model m;
    int const rank = transport.rank();
    sluice::pipeline pipe{sluice::block_top_k{.ratio = 0.01}, sluice::residual{}, sluice::adam{.lr = 1e-3}, transport,
                          sluice::pipeline_options{.staleness = 1}};
    pipe.attach(m.layout, m.params);
    std::vector<std::span<float const>> const weights{m.w, m.b};
    std::vector<std::vector<float>> g{m.gw, m.gb};
    for (int step = 0; step < 4; ++step) {
      for (std::size_t i = g.size(); i-- > 0;) {
        backward_into(i, weights, g[i], rank);
        pipe.gradient_ready(i, g[i]);
      }
      pipe.step();
    }
    pipe.synchronize();
    copied[static_cast<std::size_t>(rank)] = m.w;
  });
  CHECK(out[0] == out[1]);
  CHECK(out == copied);
  CHECK(out[0] != std::vector<float>(out[0].size(), 0.0f));
}

TEST_CASE("docs/pipeline.md and docs/solver.md: the solver's controller in a pipeline") {
  toy_model m;
  sluice::problem const problem = toy_problem(m);
  auto eps = sluice::local_transport::create(1);
  int const rank = 0, steps = 5;
  auto const& layout = m.layout;
  auto const& params = m.params;
  auto const& grads = m.grads;
  auto forward_and_backward = [&](std::size_t batch) {
    CHECK(batch == 16);
    m.forward_and_backward();
  };
  sluice::pipeline pipe{sluice::top_k{.ratio = 0.2}, sluice::residual{}, sluice::sgd{.lr = 0.05}, eps[0],
                        sluice::pipeline_options{.staleness = 1}};
  // example-begin adaptive
  sluice::solver s(problem);  // problem.codecs: values of the pipeline's codec type only
  sluice::monitor_sink mon;   // bandwidth from the pipeline's own exchange samples
  pipe.set_telemetry(mon);
  sluice::config_request want;
  want.staleness = 1;  // fixed for the run: the pipeline's options
  want.bucket_cap_bytes = pipe.options().bucketing.cap_bytes;
  sluice::adaptive_control adapt(pipe, sluice::controller(s, want, {.switch_delay = 2}), [&] {
    auto const seen = mon.snapshot();
    return seen.samples() ? std::vector<double>{seen.link_estimate()} : std::vector<double>{};  // empty: configured
  });
  pipe.attach(layout, params);  // after adaptive_control, on every rank
  for (int step = 0; step < steps; ++step) {
    sluice::plan const cfg = adapt.current();  // the plan of the step about to run
    forward_and_backward(cfg.batches[rank]);
    pipe.step(grads);
  }
  // adapt.log(): every switch (decided step, effective step, from, to, reason), the same on every rank
  // example-end adaptive
  pipe.synchronize();
  CHECK(pipe.steps() == static_cast<std::uint64_t>(steps));
}

TEST_CASE("docs/solver.md: a plan from measurements, and the controller") {
  sluice::layout layout;
  layout.add("fc1.weight", {512, 784}).add("fc1.bias", {512}).add("fc2.weight", {10, 512});
  sluice::bandwidth_monitor monitor;
  for (int i = 1; i <= 4; ++i) monitor.observe(1 << 20, 0.01, 0.1 * i);
  // example-begin solve
  sluice::compute_samples fast, slow;               // each rank's measured forward/backward steps
  fast.observe(16, 0.106), fast.observe(8, 0.058);  // (batch, seconds): 10 ms + 6 ms per sample
  slow.observe(8, 0.111), slow.observe(4, 0.063);   // 15 ms + 12 ms per sample
  sluice::problem p;
  p.workers = {{.compute = fast.fit(), .max_batch = 16}, {.compute = slow.fit(), .max_batch = 8}};  // one per rank
  p.links = {{.group = 2, .bytes_per_second = 125e6, .latency_seconds = 200e-6}};                   // innermost first
  p.model = layout;  // the gradient tensors
  p.codecs = {
      {sluice::identity{}, 0}, {sluice::top_k{.ratio = 0.01}, 0.05e-9}, {sluice::maxmin_quantize{.bits = 4}, 0.04e-9}};
  p.global_batches = {16, 24};
  p.apply_seconds_per_byte = 0.07e-9;
  sluice::solver s(p);  // validates; precomputes the bucket tables (once)

  sluice::config_request want;                                                     // every field auto_select ...
  want.staleness = 1;                                                              // ... except those the user fixes
  sluice::plan cfg = s.solve(want, std::vector<double>{monitor.link_estimate()});  // bytes/s, one per link level
  // cfg.codec (a std::variant of codec values), cfg.batches[rank], cfg.bucket_cap_bytes, cfg.staleness,
  // cfg.predicted.{step_seconds, steps_to_target, time_to_accuracy, stages}
  // example-end solve
  CHECK(cfg.staleness == 1);
  CHECK(cfg.batches.size() == 2);
}

TEST_CASE("docs/solver.md: the controller over a world of ranks") {
  sluice::layout layout;
  layout.add("fc1.weight", {512, 784}).add("fc1.bias", {512}).add("fc2.weight", {10, 512});
  sluice::problem p;
  p.workers = {{.compute = {0.01, 0.0005}, .max_batch = 16}, {.compute = {0.01, 0.0005}, .max_batch = 16}};
  p.links = {{.group = 2, .bytes_per_second = 125e6, .latency_seconds = 200e-6}};
  p.model = layout;
  p.codecs = {{sluice::identity{}, 0}, {sluice::top_k{.ratio = 0.01}, 0.05e-9}};
  p.global_batches = {16};
  sluice::solver const s(p);
  sluice::config_request want;
  want.staleness = 1;
  sluice::bandwidth_monitor monitor;
  for (int i = 1; i <= 4; ++i) monitor.observe(1 << 20, 0.01, 0.1 * i);
  std::vector<std::size_t> switches(2), steps_run(2);
  local_world(2, [&](sluice::local_transport& transport) {
    std::uint64_t const steps = 20;
    std::size_t& ran = steps_run[static_cast<std::size_t>(transport.rank())];
    auto run_step = [&](sluice::plan const&) { ++ran; };
    // example-begin controller
    sluice::controller ctl(s, want, {.decide_every = 1, .switch_delay = 2, .min_gain = 0.05, .min_dwell = 8});
    for (std::uint64_t step = 0; step < steps; ++step) {
      sluice::plan const& cfg = ctl.step(transport, step, std::vector<double>{monitor.link_estimate()});  // collective
      run_step(cfg);  // ctl.log() holds every switch with its reason
    }
    // example-end controller
    switches[static_cast<std::size_t>(transport.rank())] = ctl.log().size();
  });
  CHECK(switches[0] == switches[1]);
  CHECK(steps_run == std::vector<std::size_t>{20, 20});
}

TEST_CASE("docs/solver.md: adaptive_control in short") {
  toy_model m;
  sluice::problem const problem = toy_problem(m);
  sluice::solver const s(problem);
  sluice::config_request want;
  want.staleness = 1;
  want.bucket_cap_bytes = std::size_t{25} << 20;
  sluice::bandwidth_monitor monitor;
  monitor.observe(1 << 20, 0.01, 0.1);
  auto eps = sluice::local_transport::create(1);
  sluice::pipeline pipe{sluice::top_k{.ratio = 0.2}, sluice::residual{}, sluice::sgd{.lr = 0.05}, eps[0],
                        sluice::pipeline_options{.staleness = 1}};
  auto const& layout = m.layout;
  auto const& params = m.params;
  auto const& grads = m.grads;
  int const rank = 0, steps = 3;
  auto forward_and_backward = [&](std::size_t batch) {
    CHECK(batch == 16);
    m.forward_and_backward();
  };
  // example-begin adaptive-short
  sluice::adaptive_control adapt(pipe, sluice::controller(s, want, {.switch_delay = 2}),
                                 [&] { return std::vector<double>{monitor.link_estimate()}; });  // before attach
  pipe.attach(layout, params);
  for (int step = 0; step < steps; ++step) {
    auto const cfg = adapt.current();
    forward_and_backward(cfg.batches[rank]);
    pipe.step(grads);
  }
  // example-end adaptive-short
  pipe.synchronize();
  CHECK(pipe.steps() == static_cast<std::uint64_t>(steps));
}

// docs/architecture.md's unit for the compile-time figures: compiled, not run (it is there to be
// compiled; at run time its restore() after a step is refused). Kept as the page prints it.
namespace docs_architecture {
// clang-format off
// example-begin one-pipeline
void run(sluice::local_transport t, sluice::layout const& l, std::span<std::span<float> const> p,
         std::span<std::span<float const> const> g) {
  sluice::pipeline pipe{sluice::top_k{.ratio = 0.01}, sluice::residual{}, sluice::adam{.lr = 1e-3},
                        std::move(t), sluice::pipeline_options{.staleness = 1}};
  pipe.attach(l, p); pipe.step(g); pipe.synchronize(); auto b = pipe.save(); pipe.restore(b);
}
// example-end one-pipeline
// clang-format on
}  // namespace docs_architecture
