// The definitions behind sluice::any_pipeline: include this header in the translation unit(s) that
// compile the pipelines (sluice_add_any_pipeline generates one per codec) and instantiate each
// codec's with SLUICE_INSTANTIATE_ANY_PIPELINE(codec, transport). Trainers include
// <sluice/pipeline/any.hpp> only.
#pragma once

#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <sluice/core/error.hpp>
#include <sluice/pipeline/any.hpp>
#include <sluice/pipeline/pipeline.hpp>

namespace sluice::detail::any {

/// A TelemetrySink forwarding to a type-erased one.
struct erased_sink {
  std::shared_ptr<detail::pipeline::sink_base> to;
  void record(stage_sample const& s) noexcept { to->record(s); }
  void record(step_report const& r) noexcept { to->record(r); }
};

/// pipeline_interface over pipeline P.
template <class P>
class model final : public pipeline_interface {
 public:
  template <class... A>
  explicit model(A&&... args) : p_(std::forward<A>(args)...) {}

  void attach(layout const& l, std::span<std::span<float> const> params) override { p_.attach(l, params); }
  void gradient_ready(std::size_t tensor, std::span<float const> grad) override { p_.gradient_ready(tensor, grad); }
  [[nodiscard]] std::span<std::span<float> const> gradients() override { return p_.gradients(); }
  void gradient_ready(std::size_t tensor) override { p_.gradient_ready(tensor); }
  void step() override { p_.step(); }
  void step(std::span<std::span<float const> const> grads) override { p_.step(grads); }
  void synchronize() override { p_.synchronize(); }
  [[nodiscard]] std::span<std::span<float const> const> parameters() const noexcept override { return p_.parameters(); }
  void set_batch_sizes(std::span<std::size_t const> batches) override { p_.set_batch_sizes(batches); }
  [[nodiscard]] std::vector<std::byte> save() override { return p_.save(); }
  void restore(std::span<std::byte const> bytes) override { p_.restore(bytes); }
  [[nodiscard]] std::uint64_t steps() const noexcept override { return p_.steps(); }
  [[nodiscard]] std::uint64_t published() const noexcept override { return p_.published(); }
  [[nodiscard]] std::uint64_t run_id() const noexcept override { return p_.run_id(); }
  [[nodiscard]] step_report last_report() const override { return p_.last_report(); }
  [[nodiscard]] std::string describe() const override { return p_.describe(); }
  void set_telemetry_sink(std::shared_ptr<detail::pipeline::sink_base> sink) override {
    sinks_.push_back(std::make_unique<erased_sink>(erased_sink{std::move(sink)}));  // kept: a stage may still record
    p_.set_telemetry(*sinks_.back());
  }

 private:
  std::vector<std::unique_ptr<erased_sink>> sinks_;  // before p_: outlives its threads
  P p_;
};

template <class C, class T>
std::unique_ptr<pipeline_interface> make_for(C const& codec, any_feedback const& feedback,
                                             any_optimizer const& optimizer, T&& transport,
                                             pipeline_options const& options) {
  return std::visit(
      [&]<class F, class O>(F const& f, O const& o) -> std::unique_ptr<pipeline_interface> {
        if constexpr (std::is_same_v<C, identity> && !std::is_same_v<F, no_feedback>) {
          throw_error(errc::unsupported,
                      "any_pipeline: identity sends the gradient exactly (ring allreduce), so {} has nothing to "
                      "compensate; choose no_feedback with identity",
                      f);
        } else {
          return std::make_unique<model<::sluice::pipeline<C, F, O, T>>>(codec, f, o, std::forward<T>(transport),
                                                                         options);
        }
      },
      feedback, optimizer);
}

/// The transport type the pipeline holds for a make_any_pipeline parameter of type T: an rvalue
/// is moved in and owned, an lvalue referred to.
template <class T>
using held_transport = std::conditional_t<std::is_rvalue_reference_v<T>, std::remove_reference_t<T>, T>;

/// make_any_pipeline over the codecs `Compiled` (their make_for instantiated in the library);
/// errc::unsupported for any other codec of any_codec.
template <class T, class... Compiled>
std::unique_ptr<pipeline_interface> dispatch(any_codec const& codec, any_feedback const& feedback,
                                             any_optimizer const& optimizer, T&& transport,
                                             pipeline_options const& options) {
  return std::visit(
      [&]<class C>(C const& c) -> std::unique_ptr<pipeline_interface> {
        if constexpr ((std::is_same_v<C, Compiled> || ...)) {
          return make_for<C, held_transport<T&&>>(c, feedback, optimizer, std::forward<T>(transport), options);
        } else {
          throw_error(errc::unsupported,
                      "any_pipeline: {} is not among the codecs the linked any_pipeline library was built with; add "
                      "it to sluice_add_any_pipeline(... CODECS ...)",
                      c);
        }
      },
      codec);
}

}  // namespace sluice::detail::any

/// Compiles the any_pipeline of codec C over transport T (every feedback and optimizer of the set;
/// T: sluice::local_transport, sluice::zmq_transport& or sluice::mpi_transport&): put it at
/// namespace scope in a translation unit that includes this header.
#define SLUICE_INSTANTIATE_ANY_PIPELINE(C, T)                                                 \
  template std::unique_ptr<::sluice::pipeline_interface> sluice::detail::any::make_for<C, T>( \
      C const&, ::sluice::any_feedback const&, ::sluice::any_optimizer const&, T&&, ::sluice::pipeline_options const&)

/// Defines make_any_pipeline for the transport parameter type P (sluice::local_transport&&,
/// sluice::zmq_transport& or sluice::mpi_transport&) over the codecs listed after it, each compiled
/// with SLUICE_INSTANTIATE_ANY_PIPELINE; once per library.
#define SLUICE_DEFINE_ANY_PIPELINE(P, ...)                                                                  \
  std::unique_ptr<::sluice::pipeline_interface> sluice::make_any_pipeline(                                  \
      ::sluice::any_codec const& c, ::sluice::any_feedback const& f, ::sluice::any_optimizer const& o, P t, \
      ::sluice::pipeline_options const& opt) {                                                              \
    return ::sluice::detail::any::dispatch<P, __VA_ARGS__>(c, f, o, std::forward<P>(t), opt);               \
  }
