// sluice::torch: a libtorch (PyTorch C++) trainer's parameters and gradients as sluice::pipeline
// takes them — zero-copy spans over float32 CPU tensors, a layout from a module's named
// parameters, and gradient hooks that hand each gradient to pipeline::gradient_ready as soon as
// backward has accumulated it (the hooks DDP's reducer registers), so buckets start while backward runs.
//
//   auto net = std::make_shared<my_net>();
//   sluice::torch_parameters params(*net);                 // checks every parameter once
//   sluice::pipeline pipe{codec, feedback, optimizer, std::move(transport)};
//   pipe.attach(params.layout(), params.spans());         // the pipeline writes the tensors in place
//   sluice::torch_gradient_hooks hooks(params, pipe);      // gradient_ready(i, grad) during backward
//   for (...) { net->zero_grad(); loss(net->forward(x), y).backward(); pipe.step(); }
//
// The rule the hooks rely on: one backward() per step, on the trainer thread, with the gradients
// zeroed (or reset) before it. A hook fires once per backward for each parameter the graph
// reaches, after autograd has accumulated that parameter's gradient, and hands over what .grad()
// then holds; a second backward in the same step (gradient accumulation) is refused by the
// pipeline (errc::invalid_argument: handed in twice). To accumulate gradients over several
// backward passes, do without the hooks: run them all, then pipe.step(params.gradients()).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <fmt/ostream.h>

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <sluice/bucket/layout.hpp>
#include <sluice/core/error.hpp>

namespace sluice {

/// Checks that `t` can be viewed in place as fp32 elements: defined, float32, on the CPU, strided
/// (not sparse) and contiguous. errc::unsupported naming `what` and the fix otherwise.
inline void check_torch_tensor(torch::Tensor const& t, std::string_view what) {
  require(t.defined(), errc::invalid_argument, "sluice torch: {} is undefined (no storage); {}", what,
          "a gradient is defined only after a backward() that reached its parameter");
  require(t.layout() == torch::kStrided, errc::unsupported,
          "sluice torch: {} is a sparse tensor ({}); sluice views dense tensors: use dense gradients "
          "(e.g. torch::nn::EmbeddingOptions::sparse(false)) or t.to_dense()",
          what, fmt::streamed(t.layout()));
  require(t.scalar_type() == torch::kFloat32, errc::unsupported,
          "sluice torch: {} is {}; sluice steps float32 tensors: convert the module with module->to(torch::kFloat32)",
          what, c10::toString(t.scalar_type()));
  require(t.device().is_cpu(), errc::unsupported,
          "sluice torch: {} is on {}; sluice views CPU memory: keep the module on the CPU (module->to(torch::kCPU))",
          what, t.device().str());
  require(t.is_contiguous(), errc::unsupported,
          "sluice torch: {} is not contiguous (sizes {}, strides {}); make it so before handing it to sluice, "
          "e.g. for a parameter p: p.set_data(p.contiguous())",
          what, fmt::streamed(t.sizes()), fmt::streamed(t.strides()));
}

/// The elements of a float32, CPU, contiguous tensor as a span over its own storage: no copy,
/// writing through the span writes the tensor. Checked by check_torch_tensor (errors name `what`).
/// Valid while the tensor's storage lives and is not reallocated (set_(), set_data, resize_).
inline std::span<float> torch_span(torch::Tensor const& t, std::string_view what = "tensor") {
  check_torch_tensor(t, what);
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

/// The parameters of a libtorch model as the pipeline takes them: a sluice::layout (names and
/// shapes, in the module's registration order, so every rank builds the same one) and one
/// zero-copy span per parameter. Every tensor is checked once, here; parameters that do not
/// require a gradient (frozen) are left out, as DDP leaves them out.
class torch_parameters {
 public:
  /// module.named_parameters() (recursively, registration order) that require a gradient.
  explicit torch_parameters(torch::nn::Module const& module) : torch_parameters(named_of(module)) {}

  /// The named tensors given, in this order (a subset of a model, or a hand-written one).
  explicit torch_parameters(std::vector<std::pair<std::string, torch::Tensor>> named) {
    for (std::size_t i = 0; i < named.size(); ++i) {
      auto& [name, t] = named[i];
      spans_.push_back(torch_span(t, fmt::format("parameter #{} '{}'", i, name)));
      std::vector<std::size_t> shape;
      for (auto d : t.sizes()) shape.push_back(static_cast<std::size_t>(d));
      layout_.add(name, std::move(shape));
      names_.push_back(std::move(name));
      storages_.push_back(t.storage());
      tensors_.push_back(std::move(t));
    }
    require(!tensors_.empty(), errc::invalid_argument,
            "sluice torch: no parameter requires a gradient; there is nothing to train");
    // Tied weights (one tensor registered under two names) would be updated twice per step.
    std::vector<std::size_t> order(spans_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return std::less<float const*>{}(spans_[a].data(), spans_[b].data());
    });
    for (std::size_t k = 1; k < order.size(); ++k) {
      auto const &lo = spans_[order[k - 1]], &hi = spans_[order[k]];
      if (!lo.empty() && !hi.empty() && std::less<float const*>{}(hi.data(), lo.data() + lo.size()))
        throw_error(errc::invalid_argument,
                    "sluice torch: parameters '{}' and '{}' share memory (tied weights?); pass each tensor "
                    "once, e.g. torch_parameters from a list of named tensors without the duplicate",
                    names_[order[k - 1]], names_[order[k]]);
    }
  }

  /// Number of parameters.
  [[nodiscard]] std::size_t size() const noexcept { return tensors_.size(); }
  /// Parameter i's name (as in module.named_parameters()).
  [[nodiscard]] std::string const& name(std::size_t i) const { return names_.at(i); }
  /// Parameter i.
  [[nodiscard]] torch::Tensor const& tensor(std::size_t i) const { return tensors_.at(i); }
  [[nodiscard]] std::vector<torch::Tensor> const& tensors() const noexcept { return tensors_; }
  /// Names and shapes, f32: what every rank attaches.
  [[nodiscard]] sluice::layout const& layout() const noexcept { return layout_; }
  /// Parameter i's elements, in place (what attach() takes: the pipeline writes updates there).
  [[nodiscard]] std::span<std::span<float> const> spans() const noexcept { return spans_; }

  /// Throws errc::invalid_argument naming parameter i when its storage is no longer the one
  /// spans()[i] views (replaced by set_(), set_data() or a reallocating resize_()): the pipeline
  /// would write the step's update where the trainer no longer reads. The storage seen at
  /// construction is kept alive, so such a write never reaches freed memory. Cheap: a pointer
  /// and a size compared; gradient() and gradients() call it every step, torch_gradient_hooks
  /// for every parameter within each backward.
  void check_storage(std::size_t i) const {
    require(i < tensors_.size(), errc::invalid_argument, "sluice torch: parameter id {} outside [0, {})", i,
            tensors_.size());
    auto const& t = tensors_[i];
    bool const same = t.defined() && t.data_ptr() == static_cast<void*>(spans_[i].data()) &&
                      static_cast<std::size_t>(t.numel()) == spans_[i].size();
    require(same, errc::invalid_argument,
            "sluice torch: parameter #{} '{}' no longer lives in the memory attached to the pipeline (its storage was "
            "replaced, e.g. by set_(), set_data() or resize_()); the pipeline writes its updates in place, so a "
            "parameter's storage must stay for the run: copy new values in with p.copy_(v) under torch::NoGradGuard, "
            "or build new torch_parameters and attach again",
            i, names_[i]);
  }
  /// check_storage for every parameter.
  void check_storage() const {
    for (std::size_t i = 0; i < tensors_.size(); ++i) check_storage(i);
  }

  /// Parameter i's gradient (.grad()) in place, checked (errors name the parameter), after
  /// check_storage(i).
  [[nodiscard]] std::span<float const> gradient(std::size_t i) const {
    check_storage(i);
    auto const g = tensors_[i].grad();
    auto const s = torch_span(g, fmt::format("gradient of parameter #{} '{}'", i, names_[i]));
    require(s.size() == spans_[i].size(), errc::size_mismatch,
            "sluice torch: gradient of parameter #{} '{}' has {} elements, the parameter {}", i, names_[i], s.size(),
            spans_[i].size());
    return s;
  }
  /// Every gradient in place, for pipeline::step(grads) (when not using torch_gradient_hooks).
  [[nodiscard]] std::vector<std::span<float const>> gradients() const {
    std::vector<std::span<float const>> g;
    g.reserve(tensors_.size());
    for (std::size_t i = 0; i < tensors_.size(); ++i) g.push_back(gradient(i));
    return g;
  }

 private:
  static std::vector<std::pair<std::string, torch::Tensor>> named_of(torch::nn::Module const& module) {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (auto const& item : module.named_parameters(/*recurse=*/true))
      if (item.value().requires_grad()) named.emplace_back(item.key(), item.value());
    return named;
  }

  std::vector<std::string> names_;
  std::vector<torch::Tensor> tensors_;
  std::vector<c10::Storage> storages_;  // what spans_ view, kept alive whatever happens to tensors_
  sluice::layout layout_;
  std::vector<std::span<float>> spans_;
};

/// Hands parameter i's gradient to a pipeline's gradient_ready(i, grad) — or to any callable
/// taking (std::size_t, std::span<float const>) — during backward, as soon as autograd has
/// accumulated it: a post-hook on each parameter's gradient accumulator, the hook DDP registers.
/// The hook runs on the thread that runs backward (the trainer thread for CPU tensors); an
/// exception it throws (a sluice::error from the pipeline, a check of the gradient) leaves
/// backward() as that exception. Removes its hooks when destroyed; neither copied nor moved
/// (the hooks point at it). See the top of this file for the one-backward-per-step rule.
class torch_gradient_hooks {
 public:
  using sink_type = std::function<void(std::size_t, std::span<float const>)>;

  /// Hooks that call pipe.gradient_ready(i, grad); `params` and `pipe` must outlive them.
  template <class Pipeline>
  requires requires(Pipeline& p, std::size_t i, std::span<float const> g) { p.gradient_ready(i, g); }
  torch_gradient_hooks(torch_parameters const& params, Pipeline& pipe)
      : torch_gradient_hooks(
            params, sink_type([&pipe](std::size_t i, std::span<float const> g) { pipe.gradient_ready(i, g); })) {}

  /// Hooks that call sink(i, grad) (e.g. to time or log the hand-over around gradient_ready).
  torch_gradient_hooks(torch_parameters const& params, sink_type sink)
      : sink_(std::move(sink)), params_(&params), tensors_(params.tensors()) {
    require(static_cast<bool>(sink_), errc::invalid_argument, "sluice torch: gradient hooks need a sink");
    for (std::size_t i = 0; i < tensors_.size(); ++i) names_.push_back(params.name(i));
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      // The accumulator is held weakly by the tensor; keeping it alive keeps the hook on it.
      std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(tensors_[i]);
      require(acc != nullptr, errc::invalid_argument,
              "sluice torch: parameter #{} '{}' has no gradient accumulator (not a leaf that requires a gradient)", i,
              names_[i]);
      std::uintptr_t const key = acc->add_post_hook(std::make_unique<hook>(this, i));
      hooks_.emplace_back(key, std::move(acc));
    }
  }

  torch_gradient_hooks(torch_gradient_hooks const&) = delete;
  torch_gradient_hooks& operator=(torch_gradient_hooks const&) = delete;
  ~torch_gradient_hooks() {
    for (auto& [key, acc] : hooks_) acc->del_post_hook(key);
  }

  /// Number of parameters hooked.
  [[nodiscard]] std::size_t size() const noexcept { return tensors_.size(); }

 private:
  struct hook final : torch::autograd::FunctionPostHook {
    torch_gradient_hooks* owner;
    std::size_t index;
    hook(torch_gradient_hooks* o, std::size_t i) : owner(o), index(i) {}
    torch::autograd::variable_list operator()(torch::autograd::variable_list const& outputs,
                                              torch::autograd::variable_list const& /*inputs*/) override {
      owner->deliver(index);
      return outputs;
    }
  };

  // Checks this parameter's storage and two more in turn: a parameter whose storage was replaced
  // by set_() also gets a new gradient accumulator, so its own hook never fires again; the turn
  // reaches it within the same backward (at least n / 2 hooks fire) at O(1) per hook.
  void deliver(std::size_t i) {
    params_->check_storage(i);
    for (int k = 0; k < 2; ++k) {
      params_->check_storage(cursor_);
      cursor_ = (cursor_ + 1) % tensors_.size();
    }
    auto const g = tensors_[i].grad();
    auto const s = torch_span(g, fmt::format("gradient of parameter #{} '{}'", i, names_[i]));
    sink_(i, std::span<float const>(s));
  }

  sink_type sink_;
  torch_parameters const* params_;
  std::size_t cursor_ = 0;  // the next parameter checked in turn
  std::vector<torch::Tensor> tensors_;
  std::vector<std::string> names_;
  std::vector<std::pair<std::uintptr_t, std::shared_ptr<torch::autograd::Node>>> hooks_;
};

}  // namespace sluice
