// sluice::torch: the adapter's checks (each failure a sluice::error naming the tensor), zero-copy
// views, gradient hooks that hand over each parameter's accumulated gradient exactly once per
// backward, and a 2-rank local run whose replicas are bit-identical and equal to the same run
// through step(grads) without hooks.
// The adapter comes first: this TU is also the proof that the header compiles on its own.
#include <sluice/torch/torch.hpp>

// glog (through torch) defines CHECK; this file uses the DOCTEST_-prefixed assertion names.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

#include <sluice/compress/block_top_k.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

namespace {

// A small model: a 2-D weight of 2048 elements (compressed under the default bypass rule) and
// small tensors (sent dense). fc2 is applied twice, so its accumulator sums two contributions.
struct net : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, out{nullptr};
  net() {
    fc1 = register_module("fc1", torch::nn::Linear(64, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 32));
    out = register_module("out", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x));
    x = torch::tanh(fc2(torch::tanh(fc2(x))));
    return out(x);
  }
};

torch::Tensor loss_of(net& m, int rank, int step) {
  torch::manual_seed(static_cast<std::uint64_t>(1000 + 10 * step + rank));
  auto const x = torch::randn({8, 64});
  auto const y = torch::randint(0, 4, {8});
  return torch::nn::functional::cross_entropy(m.forward(x), y);
}

void require_error(auto&& f, sluice::errc kind, std::vector<std::string> const& parts) {
  try {
    f();
    DOCTEST_FAIL("no sluice::error thrown");
  } catch (sluice::error const& e) {
    DOCTEST_CHECK(e.kind() == kind);
    for (auto const& p : parts) DOCTEST_CHECK_MESSAGE(std::string(e.what()).find(p) != std::string::npos, e.what());
  }
}

bool bit_equal(std::vector<float> const& a, std::vector<float> const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> flat(sluice::torch_parameters const& p) {
  std::vector<float> v;
  for (auto s : p.spans()) v.insert(v.end(), s.begin(), s.end());
  return v;
}

}  // namespace

DOCTEST_TEST_CASE("tensors that cannot be viewed in place are refused, naming the tensor and the fix") {
  require_error(
      [] {
        (void)sluice::torch_span(torch::zeros({4, 3}).t(), "w");
      },
      sluice::errc::unsupported, {"w is not contiguous", "contiguous()"});
  require_error([] { (void)sluice::torch_span(torch::zeros({4}, torch::kFloat64), "w"); }, sluice::errc::unsupported,
                {"w is Double", "torch::kFloat32"});
  require_error([] { (void)sluice::torch_span(torch::empty({4}, torch::device(torch::kMeta)), "w"); },
                sluice::errc::unsupported, {"w is on meta", "torch::kCPU"});
  require_error([] { (void)sluice::torch_span(torch::zeros({4}).to_sparse(), "w"); }, sluice::errc::unsupported,
                {"w is a sparse tensor", "dense"});
  require_error([] { (void)sluice::torch_span(torch::Tensor{}, "w"); }, sluice::errc::invalid_argument,
                {"w is undefined"});

  // A module: the error names the parameter's index and name.
  net m;
  m.fc2->weight.set_data(torch::zeros({32, 32}).t());
  require_error([&] { sluice::torch_parameters p(m); }, sluice::errc::unsupported,
                {"parameter #2 'fc2.weight' is not contiguous"});
  m.fc2->weight.set_data(torch::zeros({32, 32}, torch::kFloat64));
  require_error([&] { sluice::torch_parameters p(m); }, sluice::errc::unsupported,
                {"parameter #2 'fc2.weight' is Double"});

  // Tied weights would be stepped twice; frozen parameters are left out.
  auto const w = torch::zeros({3}, torch::requires_grad());
  require_error(
      [&] {
        sluice::torch_parameters p({{"a", w}, {"b", w}});
      },
      sluice::errc::invalid_argument, {"'a' and 'b' share memory"});
  net f;
  f.fc1->bias.set_requires_grad(false);
  sluice::torch_parameters const p(f);
  DOCTEST_CHECK(p.size() == 5);
  DOCTEST_CHECK(p.layout().find("fc1.bias") == p.layout().size());
  // A gradient before any backward is undefined.
  require_error([&] { (void)p.gradient(0); }, sluice::errc::invalid_argument,
                {"gradient of parameter #0 'fc1.weight' is undefined"});
}

DOCTEST_TEST_CASE("views are zero-copy and the layout follows named_parameters") {
  auto t = torch::arange(6, torch::kFloat32).reshape({2, 3});
  auto s = sluice::torch_span(t, "t");
  DOCTEST_CHECK(s.data() == t.data_ptr<float>());
  DOCTEST_CHECK(s.size() == 6);
  s[4] = 42.0f;
  DOCTEST_CHECK(t[1][1].item<float>() == 42.0f);

  net m;
  sluice::torch_parameters const p(m);
  auto const np = m.named_parameters();
  DOCTEST_REQUIRE(p.size() == np.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    DOCTEST_CHECK(p.layout()[i].name == np[i].key());
    DOCTEST_CHECK(p.layout()[i].elements() == static_cast<std::size_t>(np[i].value().numel()));
    DOCTEST_CHECK(p.spans()[i].data() == np[i].value().data_ptr<float>());
  }
  DOCTEST_CHECK(p.layout()[0].shape == std::vector<std::size_t>{32, 64});
  p.spans()[0][0] = -7.0f;
  DOCTEST_CHECK(m.fc1->weight[0][0].item<float>() == -7.0f);
}

DOCTEST_TEST_CASE("hooks hand over each accumulated gradient exactly once per backward") {
  net m;
  sluice::torch_parameters const p(m);
  std::vector<int> calls(p.size(), 0);
  std::vector<std::vector<float>> got(p.size());
  sluice::torch_gradient_hooks hooks(p, [&](std::size_t i, std::span<float const> g) {
    ++calls[i];
    got[i].assign(g.begin(), g.end());
  });
  DOCTEST_CHECK(hooks.size() == p.size());
  for (int step = 0; step < 3; ++step) {
    m.zero_grad();
    std::fill(calls.begin(), calls.end(), 0);
    loss_of(m, 0, step).backward();
    for (std::size_t i = 0; i < p.size(); ++i) {
      DOCTEST_CHECK_MESSAGE(calls[i] == 1, p.name(i));
      // What was handed over is the final .grad (fc2 is used twice: both contributions summed).
      auto const g = p.gradient(i);
      DOCTEST_CHECK(bit_equal(got[i], std::vector<float>(g.begin(), g.end())));
    }
  }
  // The rule: without zero_grad, .grad accumulates, and the hook hands over the accumulated value.
  std::vector<float> const first = got[0];
  loss_of(m, 0, 2).backward();
  DOCTEST_CHECK(calls[0] == 2);
  for (std::size_t j = 0; j < first.size(); ++j) DOCTEST_CHECK(got[0][j] == 2.0f * first[j]);
}

DOCTEST_TEST_CASE("an error in the hook leaves backward as that error, and hooks go with their object") {
  net m;
  sluice::torch_parameters const p(m);
  int calls = 0;
  {
    sluice::torch_gradient_hooks hooks(p, [&](std::size_t i, std::span<float const>) {
      ++calls;
      sluice::throw_error(sluice::errc::invalid_argument, "refused tensor {}", i);
    });
    require_error([&] { loss_of(m, 0, 0).backward(); }, sluice::errc::invalid_argument, {"refused tensor"});
  }
  calls = 0;
  m.zero_grad();
  loss_of(m, 0, 0).backward();
  DOCTEST_CHECK(calls == 0);
}

DOCTEST_TEST_CASE("a parameter whose storage was replaced (set_) is refused at the next step, naming it") {
  // Before the check the pipeline kept writing through the attached span into the old storage,
  // which set_() had freed: a heap-use-after-free. Now the old storage stays alive and every
  // step's gradient hand-over compares the parameter's data pointer with the attached span.
  net m;
  sluice::torch_parameters const p(m);
  std::vector<int> calls(p.size(), 0);
  sluice::torch_gradient_hooks hooks(p, [&](std::size_t i, std::span<float const>) { ++calls[i]; });
  loss_of(m, 0, 0).backward();
  DOCTEST_CHECK_NOTHROW(p.check_storage());
  DOCTEST_CHECK_NOTHROW((void)p.gradients());
  {
    torch::NoGradGuard no_grad;
    m.fc1->weight.set_(torch::zeros_like(m.fc1->weight));
  }
  m.zero_grad();
  // set_() also gave fc1.weight a new gradient accumulator: its own hook no longer fires, and the
  // others' hooks check every parameter in turn within the backward.
  require_error([&] { loss_of(m, 0, 1).backward(); }, sluice::errc::invalid_argument, {"'fc1.weight'", "set_()"});
  require_error([&] { (void)p.gradients(); }, sluice::errc::invalid_argument, {"'fc1.weight'"});
  require_error([&] { p.check_storage(); }, sluice::errc::invalid_argument, {"'fc1.weight'"});
  DOCTEST_CHECK_NOTHROW(p.check_storage(1));  // the other parameters are as attached
  // The attached span still points at live memory (the old storage, kept): writing it is safe.
  for (float& x : p.spans()[0]) x = 1.0f;
  DOCTEST_CHECK(m.fc1->weight.abs().sum().item<float>() == 0.0f);  // the new storage is untouched
}

DOCTEST_TEST_CASE("2 ranks on local: hooks give bit-identical replicas, equal to step(grads) without hooks") {
  torch::set_num_threads(1);
  constexpr int ranks = 2, steps = 4;
  // Runs `steps` steps on both ranks (threads) and returns each rank's parameters.
  auto run = [&](bool with_hooks) {
    std::vector<std::shared_ptr<net>> models;
    for (int r = 0; r < ranks; ++r) {
      torch::manual_seed(static_cast<std::uint64_t>(r));  // different on each rank: attach broadcasts rank 0's
      models.push_back(std::make_shared<net>());
    }
    auto eps = sluice::local_transport::create(ranks);
    std::vector<std::vector<float>> out(ranks);
    std::vector<std::exception_ptr> errors(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        auto const i = static_cast<std::size_t>(r);
        try {
          net& m = *models[i];
          sluice::torch_parameters const p(m);
          sluice::pipeline pipe{sluice::block_top_k{.ratio = 0.05}, sluice::residual{}, sluice::adam{.lr = 1e-2},
                                eps[i], sluice::pipeline_options{.staleness = 1, .seed = 3, .kernel_threads = 1}};
          pipe.attach(p.layout(), p.spans());
          std::unique_ptr<sluice::torch_gradient_hooks> hooks;
          if (with_hooks) hooks = std::make_unique<sluice::torch_gradient_hooks>(p, pipe);
          for (int s = 0; s < steps; ++s) {
            m.zero_grad();
            // Each rank draws its own batch; the global generator is shared, so draw under a lock.
            torch::Tensor loss;
            {
              static std::mutex mu;
              std::lock_guard lock(mu);
              torch::manual_seed(static_cast<std::uint64_t>(1000 + 10 * s + r));
              auto const x = torch::randn({8, 64});
              auto const y = torch::randint(0, 4, {8});
              loss = torch::nn::functional::cross_entropy(m.forward(x), y);
            }
            loss.backward();
            if (with_hooks)
              pipe.step();
            else
              pipe.step(p.gradients());
          }
          pipe.synchronize();
          out[i] = flat(p);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto const& e : errors)
      if (e) std::rethrow_exception(e);
    return out;
  };
  auto const hooked = run(true);
  auto const plain = run(false);
  DOCTEST_CHECK(bit_equal(hooked[0], hooked[1]));
  DOCTEST_CHECK(bit_equal(plain[0], plain[1]));
  DOCTEST_CHECK(bit_equal(hooked[0], plain[0]));
  // The parameters moved (the run did train).
  torch::manual_seed(0);
  net initial;
  DOCTEST_CHECK(!bit_equal(hooked[0], flat(sluice::torch_parameters(initial))));
}
