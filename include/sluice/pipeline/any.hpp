// sluice::any_pipeline: codec, feedback and optimizer chosen at run time (a command line, a
// config file) from a closed set, without instantiating every combination in the trainer's
// translation unit. The pipelines are compiled once, elsewhere: CMake's
// sluice_add_any_pipeline(<library> TRANSPORT local|zmq|mpi) builds them into a static library
// (one translation unit per codec, compiled in parallel), or one .cpp of the user's includes
// <sluice/pipeline/any_impl.hpp> and instantiates them with SLUICE_INSTANTIATE_ANY_PIPELINE.
// This header parses the policies but instantiates no pipeline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <sluice/bucket/layout.hpp>
#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/qsgd.hpp>
#include <sluice/compress/random_k.hpp>
#include <sluice/compress/sign.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/optim/adamw.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/concepts.hpp>
#include <sluice/pipeline/detail/stages.hpp>
#include <sluice/pipeline/options.hpp>

namespace sluice {

/// The codecs, feedbacks and optimizers an any_pipeline chooses among (the variant's index is the
/// choice; `identity` runs with `no_feedback` only, through the ring allreduce).
using any_codec = std::variant<identity, top_k, block_top_k, random_k, maxmin_quantize, qsgd, sign>;
using any_feedback = std::variant<no_feedback, residual>;
using any_optimizer = std::variant<sgd, adam, adamw>;

/// What every pipeline offers a trainer, type-erased (one virtual call per trainer call).
class pipeline_interface {
 public:
  virtual ~pipeline_interface() = default;
  virtual void attach(layout const& l, std::span<std::span<float> const> params) = 0;
  virtual void gradient_ready(std::size_t tensor, std::span<float const> grad) = 0;
  [[nodiscard]] virtual std::span<std::span<float> const> gradients() = 0;
  virtual void gradient_ready(std::size_t tensor) = 0;
  virtual void step() = 0;
  virtual void step(std::span<std::span<float const> const> grads) = 0;
  virtual void synchronize() = 0;
  [[nodiscard]] virtual std::span<std::span<float const> const> parameters() const noexcept = 0;
  virtual void set_batch_sizes(std::span<std::size_t const> batches) = 0;
  [[nodiscard]] virtual std::vector<std::byte> save() = 0;
  virtual void restore(std::span<std::byte const> bytes) = 0;
  [[nodiscard]] virtual std::uint64_t steps() const noexcept = 0;
  [[nodiscard]] virtual std::uint64_t published() const noexcept = 0;
  [[nodiscard]] virtual std::uint64_t run_id() const noexcept = 0;
  [[nodiscard]] virtual step_report last_report() const = 0;
  [[nodiscard]] virtual std::string describe() const = 0;
  virtual void set_telemetry_sink(std::shared_ptr<detail::pipeline::sink_base> sink) = 0;
};

class local_transport;
class zmq_transport;
class mpi_transport;

/// The pipeline of the chosen policies over a transport: defined where the pipelines are compiled
/// (sluice_add_any_pipeline, or SLUICE_DEFINE_ANY_PIPELINE in a translation unit of your own).
std::unique_ptr<pipeline_interface> make_any_pipeline(any_codec const& codec, any_feedback const& feedback,
                                                      any_optimizer const& optimizer, local_transport&& transport,
                                                      pipeline_options const& options);
std::unique_ptr<pipeline_interface> make_any_pipeline(any_codec const& codec, any_feedback const& feedback,
                                                      any_optimizer const& optimizer, zmq_transport& transport,
                                                      pipeline_options const& options);
std::unique_ptr<pipeline_interface> make_any_pipeline(any_codec const& codec, any_feedback const& feedback,
                                                      any_optimizer const& optimizer, mpi_transport& transport,
                                                      pipeline_options const& options);

/// A pipeline whose codec, feedback and optimizer are values chosen at run time. T: the transport,
/// as for sluice::pipeline (an rvalue local_transport is moved in; zmq_transport& and
/// mpi_transport& are referred to). Same calls, thread-safety and errors as sluice::pipeline;
/// errc::unsupported for identity with error feedback, and for a codec the linked library was built
/// without. The pipelines for T must be linked in (see the file comment); without them the link
/// fails naming make_any_pipeline.
template <class T>
class any_pipeline {
 public:
  any_pipeline(any_codec const& codec, any_feedback const& feedback, any_optimizer const& optimizer, T&& transport,
               pipeline_options const& options = {})
      : p_(make_any_pipeline(codec, feedback, optimizer, std::forward<T>(transport), options)) {}

  void attach(layout const& l, std::span<std::span<float> const> params) { p_->attach(l, params); }
  void gradient_ready(std::size_t tensor, std::span<float const> grad) { p_->gradient_ready(tensor, grad); }
  /// gradient_home::pipeline: this step's gradient buffers (pipeline::gradients()).
  [[nodiscard]] std::span<std::span<float> const> gradients() { return p_->gradients(); }
  void gradient_ready(std::size_t tensor) { p_->gradient_ready(tensor); }
  void step() { p_->step(); }
  void step(std::span<std::span<float const> const> grads) { p_->step(grads); }
  void synchronize() { p_->synchronize(); }
  [[nodiscard]] std::span<std::span<float const> const> parameters() const noexcept { return p_->parameters(); }
  void set_batch_sizes(std::span<std::size_t const> batches) { p_->set_batch_sizes(batches); }
  [[nodiscard]] std::vector<std::byte> save() { return p_->save(); }
  void restore(std::span<std::byte const> bytes) { p_->restore(bytes); }
  [[nodiscard]] std::uint64_t steps() const noexcept { return p_->steps(); }
  [[nodiscard]] std::uint64_t published() const noexcept { return p_->published(); }
  [[nodiscard]] std::uint64_t run_id() const noexcept { return p_->run_id(); }
  [[nodiscard]] step_report last_report() const { return p_->last_report(); }
  [[nodiscard]] std::string describe() const { return p_->describe(); }
  /// As pipeline::set_telemetry: the sink must outlive the pipeline.
  template <TelemetrySink S>
  void set_telemetry(S& sink) {
    p_->set_telemetry_sink(std::make_shared<detail::pipeline::sink_ref<S>>(sink));
  }

 private:
  std::unique_ptr<pipeline_interface> p_;
};

template <class T>
any_pipeline(any_codec, any_feedback, any_optimizer, T&&) -> any_pipeline<T>;
template <class T>
any_pipeline(any_codec, any_feedback, any_optimizer, T&&, pipeline_options) -> any_pipeline<T>;

}  // namespace sluice
