// Runs the solver's controller inside a running pipeline: rank 0's decisions travel on the
// pipeline's exchange thread (the transport's only user after attach), and every rank applies a
// new codec strength at the switch's effective step, before that step's first encode.
//
//   sluice::solver s(problem);                                  // candidates: values of the pipeline's codec type
//   sluice::pipeline pipe{sluice::top_k{}, sluice::residual{}, sluice::sgd{.lr = 0.1}, transport, options};
//   sluice::adaptive_control adapt(pipe, sluice::controller(s, request, {.switch_delay = options.staleness + 1}),
//                                  [&] { return std::vector<double>{bytes_per_second()}; });
//   pipe.attach(layout, params);
//   for (...) { auto const cfg = adapt.current(); ... cfg.batches[rank] ...; pipe.step(grads); }
//
// Applied: the plan's codec (a value of the pipeline's codec type C: a ratio, a bit width), on
// every rank at the same step; error feedback carries over as with pipeline::set_codec. Not
// applied: per-worker batch sizes (the trainer's; read them from current()); the bucket cap and
// staleness are fixed for the run, so the request must fix them to the pipeline's options.
// The plan's codec is set as each step begins, so a set_codec call of the trainer's lasts until
// the next step only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <sluice/collective/concepts.hpp>
#include <sluice/core/error.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/solver/controller.hpp>
#include <sluice/transport/concepts.hpp>

namespace sluice {

/// The link bandwidths the controller decides from: bytes/s, one per link level of the solver's
/// problem (empty: the problem's configured ones). Called on rank 0's exchange thread at each
/// decision step; the other ranks' sources are not called (rank 0 decides for all).
using bandwidth_source = std::function<std::vector<double>()>;

namespace detail::adaptive {

template <class C, class V>
inline constexpr bool is_alternative = false;
template <class C, class... Ts>
inline constexpr bool is_alternative<C, std::variant<Ts...>> = (std::is_same_v<C, Ts> || ...);

// The hook the pipeline runs: the controller on the exchange thread; the plan log, shared with
// the trainer's thread under a mutex.
template <class C, class Tr>
class binding final : public step_hook<C, Tr> {
 public:
  binding(controller ctl, bandwidth_source src) : ctl_(std::move(ctl)), src_(std::move(src)), first_(ctl_.current()) {}

  void before_exchange(Tr& t, std::uint64_t step) override {
    std::vector<double> bw;
    if (t.rank() == 0 && src_) bw = src_();
    ctl_.step(t, step, std::span<double const>(bw));
    auto const log = ctl_.log();
    if (log.size() == seen_) return;
    std::lock_guard lock(mu_);
    log_.insert(log_.end(), log.begin() + static_cast<std::ptrdiff_t>(seen_), log.end());
    seen_ = log.size();
  }

  // The controller only accepts plans of the agreed candidates (all of type C, checked by
  // adaptive_control); a plan of another type is refused here too rather than reaching std::get.
  void before_encode(std::uint64_t step, C& codec) override {
    plan const p = plan_for(step);
    auto const* c = std::get_if<C>(&p.codec);
    require(c != nullptr, errc::malformed_message,
            "adaptive_control: the plan for step {} holds codec {}, not of this pipeline's codec type", step, p.codec);
    codec = *c;
  }

  [[nodiscard]] plan plan_for(std::uint64_t step) const {
    std::lock_guard lock(mu_);
    for (auto e = log_.rbegin(); e != log_.rend(); ++e)
      if (e->effective_step <= step) return e->to;
    return first_;
  }
  [[nodiscard]] std::vector<switch_event> log() const {
    std::lock_guard lock(mu_);
    return log_;
  }
  [[nodiscard]] controller_options const& options() const noexcept { return ctl_.options(); }

 private:
  controller ctl_;  // the exchange thread's only
  bandwidth_source src_;
  plan const first_;
  std::size_t seen_ = 0;  // the exchange thread's only
  mutable std::mutex mu_;
  std::vector<switch_event> log_;
};

}  // namespace detail::adaptive

/// A controller bound to a pipeline (see the file comment). Construct it before attach(), on
/// every rank, from the same problem, request and options. The pipeline keeps the controller
/// alive; the solver it was built from must outlive the pipeline. Checkpoints do not record the
/// controller: a restored pipeline's controller starts again from its first plan.
template <class Pipeline>
class adaptive_control {
 public:
  using codec_type = typename Pipeline::codec_type;
  using transport_type = typename Pipeline::transport_type;

  static_assert(detail::adaptive::is_alternative<codec_type, codec_value>,
                "sluice::adaptive_control: the solver chooses among identity, top_k, block_top_k and "
                "maxmin_quantize (codec_value), and this pipeline's codec type is none of them; build the "
                "pipeline with one of those codecs to let the controller set its strength");

  /// Checks that every plan the controller may choose can run on `pipe`, then installs the
  /// controller as the pipeline's step hook. Before anything changes: errc::unsupported for a codec
  /// candidate (or fixed codec) of another type than the pipeline's; errc::invalid_argument for a
  /// switch_delay below staleness + 1 (a switch must reach every rank before the first encode of
  /// its step), for staleness or bucket-cap candidates other than the pipeline's options, for a
  /// problem with another number of workers than ranks, for a controller tag inside the
  /// pipeline's tags, and for a pipeline already attached.
  adaptive_control(Pipeline& pipe, controller ctl, bandwidth_source bandwidths = {}) : pipe_(&pipe) {
    check(pipe, ctl);
    hook_ =
        std::make_shared<detail::adaptive::binding<codec_type, transport_type>>(std::move(ctl), std::move(bandwidths));
    pipe.set_step_hook(hook_);
  }

  /// The plan step `step` runs with. Final for every step up to the one the trainer runs next
  /// (pipeline::steps()); later steps may still be switched by a decision not yet made.
  [[nodiscard]] plan plan_for(std::uint64_t step) const { return hook_->plan_for(step); }
  /// The plan of the step the trainer runs next: its codec is the one the pipeline will use, its
  /// batches (one per rank) are what the trainer should feed.
  [[nodiscard]] plan current() const { return hook_->plan_for(pipe_->steps()); }
  /// Every switch this rank knows of, with its decision and effective steps and its reason (the
  /// last may still be pending).
  [[nodiscard]] std::vector<switch_event> log() const { return hook_->log(); }
  [[nodiscard]] controller_options const& options() const noexcept { return hook_->options(); }

 private:
  static void check(Pipeline& pipe, controller const& ctl) {
    problem const& p = ctl.decision_solver().description();
    config_request const& req = ctl.request();
    pipeline_options const& o = pipe.options();
    int const world = pipe.transport().size();
    require(p.workers.size() == static_cast<std::size_t>(world), errc::invalid_argument,
            "adaptive_control: the solver's problem describes {} workers but the pipeline runs {} ranks",
            p.workers.size(), world);
    auto const runnable = [&](codec_value const& c, char const* what) {
      require(std::holds_alternative<codec_type>(c), errc::unsupported,
              "adaptive_control: the controller may choose {} ({}), but this pipeline's codec is {} and its type is "
              "fixed at compile time; give the solver candidates of that type only (other ratios or bit widths)",
              c, what, codec_value(pipe.codec()));
    };
    for (auto const& c : p.codecs) runnable(c.codec, "a codec candidate");
    if (auto const* c = req.codec.fixed()) runnable(*c, "the request's fixed codec");
    runnable(ctl.current().codec, "its first plan");
    std::uint64_t const delay = ctl.options().switch_delay;
    require(delay >= std::uint64_t{o.staleness} + 1, errc::invalid_argument,
            "adaptive_control: switch_delay {} is too small for staleness {}: the trainer may begin step t + s + 1 "
            "before rank 0's decision at step t reaches every rank; use switch_delay >= {}",
            delay, o.staleness, o.staleness + 1);
    std::vector<int> const stale = req.staleness.fixed() ? std::vector<int>{*req.staleness.fixed()} : p.staleness;
    for (int s : stale)
      require(s == static_cast<int>(o.staleness), errc::invalid_argument,
              "adaptive_control: the solver may choose staleness {}, but the pipeline runs staleness {} for the whole "
              "run; fix config_request::staleness = {}",
              s, o.staleness, o.staleness);
    std::vector<std::size_t> const caps =
        req.bucket_cap_bytes.fixed() ? std::vector<std::size_t>{*req.bucket_cap_bytes.fixed()} : p.bucket_caps;
    for (std::size_t cap : caps)
      require(cap == o.bucketing.cap_bytes, errc::invalid_argument,
              "adaptive_control: the solver may choose buckets of {} bytes, but the pipeline's bucketing.cap_bytes is "
              "{} for the whole run; fix config_request::bucket_cap_bytes = {}",
              cap, o.bucketing.cap_bytes, o.bucketing.cap_bytes);
    require(pipeline_tags::is_free(ctl.options().tag), errc::invalid_argument,
            "adaptive_control: controller tag {} falls among the pipeline's own tags; use a tag in [{}, {})",
            to_underlying(ctl.options().tag), pipeline_tags::first_free, to_underlying(pipeline_tags::attach));
  }

  Pipeline* pipe_;
  std::shared_ptr<detail::adaptive::binding<codec_type, transport_type>> hook_;
};

}  // namespace sluice
