// sluice::pipeline: policy values (codec, feedback, optimizer, transport) assembled at compile time
// into one object that turns a trainer's gradients into updated parameters. Per bucket it runs
// encode (feedback + codec), exchange (the collective, aggregating as messages arrive) and apply
// (the optimizer on fp32 master weights) on three stage threads, so that with staleness s >= 1
// the exchange and update of step t overlap the trainer's compute of step t + 1 (StellaTrain's
// pipelined iterations). This class holds the trainer's calls; the rest has rooms of its own:
// options.hpp, exchange.hpp, checkpoint.hpp and detail/ (machinery: the buffers and the stage
// loops; stages: the scheduler; scheduling, agreement, rules, flat_plan).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>  // not core.h: describe() formats policies; clang links fmt's vformat_to from it

#include <sluice/bucket/layout.hpp>
#include <sluice/bucket/plan.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/feedback/concepts.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/optim/step.hpp>
#include <sluice/pipeline/checkpoint.hpp>
#include <sluice/pipeline/concepts.hpp>
#include <sluice/pipeline/detail/agreement.hpp>
#include <sluice/pipeline/detail/buckets.hpp>
#include <sluice/pipeline/detail/compensation.hpp>
#include <sluice/pipeline/detail/flat_plan.hpp>
#include <sluice/pipeline/detail/machinery.hpp>
#include <sluice/pipeline/detail/parameters.hpp>
#include <sluice/pipeline/detail/rules.hpp>
#include <sluice/pipeline/detail/stages.hpp>
#include <sluice/pipeline/exchange.hpp>
#include <sluice/pipeline/options.hpp>
#include <sluice/transport/concepts.hpp>

namespace sluice {

/// The assembled pipeline. C: codec, F: feedback, O: optimizer, T: transport — an rvalue is moved
/// in and owned (std::move(endpoint), for local_transport); an lvalue is referred to (T deduces
/// to a reference, for engines that do not move, such as zmq_transport and mpi_transport; it
/// must outlive the pipeline). Collective: by_codec or one of the by_* tags. Construct from values:
///
///   sluice::pipeline pipe{sluice::block_top_k{.ratio = 0.01}, sluice::residual{}, sluice::adam{.lr = 1e-3},
///                         std::move(transport), sluice::pipeline_options{.staleness = 1}};
///   pipe.attach(layout, params);   // every rank, same layout (checked across ranks)
///   for (...) { forward(); backward(); pipe.step(grads); }
///
/// Thread-safety: one trainer thread calls attach, gradient_ready, step, synchronize, save and
/// restore; the pipeline runs its own three stage threads (encode, exchange, apply) after attach,
/// each using at most options.kernel_threads OpenMP threads for its kernels. The transport is used
/// by the exchange thread only (after attach), so engines that want one calling thread work.
/// Errors on a stage thread stop the pipeline and are rethrown by the trainer's next call.
template <class C, class F, class O, class T, class Collective = by_codec>  // checked by detail/rules.hpp
class pipeline : detail::pipeline::machinery<C, F, O, T, Collective> {
  using rules = detail::pipeline::rules<C, F, O, T, Collective>;
  using machinery = detail::pipeline::machinery<C, F, O, T, Collective>;

 public:
  using codec_type = C;
  using feedback_type = F;
  using optimizer_type = O;
  using transport_type = std::remove_cvref_t<T>;
  using collective = typename rules::collective;
  static constexpr bool sparse_exchange = rules::sparse_exchange;
  static constexpr bool ring_exchange = rules::ring_exchange;
  static constexpr bool mpi_exchange = rules::mpi_exchange;
  static constexpr bool dense_exchange = rules::dense_exchange;  ///< every bucket summed as fp32

  pipeline(C codec, F feedback, O optimizer, T&& transport, pipeline_options options = {}, Collective choice = {})
      : machinery(std::move(codec), std::move(feedback), std::move(optimizer), std::forward<T>(transport), options,
                  rules::group_size(choice), rules::gather_frames(choice)) {
    rules::validate(codec_, feedback_, opt_, options_);
    detail::pipeline::check_scheduling(options_.scheduling);
  }

  pipeline(pipeline const&) = delete;
  pipeline& operator=(pipeline const&) = delete;
  ~pipeline() { stages_.stop(); }

  /// Sizes every buffer for `l` (no allocation afterwards), checks that every rank attached the
  /// same layout and options (errc::size_mismatch naming the first differing tensor, on every
  /// rank, before any gradient moves), copies rank 0's parameters to every rank when
  /// options.broadcast_parameters, and starts the stage threads. `params[i]` is tensor i's fp32
  /// parameters; the pipeline writes the updated values there inside step() (or, with
  /// options.parameters == parameter_home::pipeline, into its own buffers: parameters()). Once per
  /// pipeline.
  void attach(layout const& l, std::span<std::span<float> const> params) {
    require(!attached_, errc::invalid_argument, "pipeline: attach() was called already");
    detail::pipeline::check_parameters(l, params);
    layout_ = l;
    run_ = detail::pipeline::agree_on_attach(t_, layout_, config_id(), describe(), options_.timeout);
    plan_ = bucket_plan(l, options_.bucketing);
    build_buffers();
    for (std::size_t i = 0; i < params.size(); ++i) flat_.gather(i, params[i], master_);
    if (options_.broadcast_parameters)
      detail::pipeline::broadcast_parameters(t_, std::span<float>(master_), options_.timeout);
    params_.reset(options_.parameters, layout_, params, buckets_.size());
    if (options_.broadcast_parameters || params_.owned()) write_parameters(master_, 0);
    ahead_.published(master_);
    attached_ = true;
    stages_.start({[this] { encode_loop(); }, [this] { exchange_loop(); }, [this] { apply_loop(); }},
                  options_.kernel_threads, options_.scheduling);
  }

  /// Hands in tensor `tensor`'s gradient of the current step (call it as backward produces each
  /// gradient, as DDP's hooks do). Nothing is copied on the trainer's thread: the encode thread
  /// reads `grad` in place as soon as all tensors of a bucket are in, while backward goes on, so
  /// the memory must stay valid and unchanged until this step's step() returns (step() waits
  /// for those reads only, never for an exchange).
  /// With gradient_home::pipeline, `grad` must be gradients()[tensor] of this step.
  void gradient_ready(std::size_t tensor, std::span<float const> grad) {
    lend_gradients([&] {
      check_usable("gradient_ready");
      detail::pipeline::check_gradient(layout_, tensor, grad.size(), reported_, step_);
      if (options_.gradients == gradient_home::pipeline) {
        require(lent_, errc::invalid_argument,
                "pipeline: gradient of '{}' handed in before gradients() was called in step {}: with "
                "gradient_home::pipeline, write each step's gradients into the buffers gradients() returns for it",
                layout_[tensor].name, step_);
        require(grad.empty() || grad.data() == owned_grads_[step_ % grads_.size()][tensor].data(),
                errc::invalid_argument,
                "pipeline: gradient of '{}' in step {} is not in gradients()[{}]: with gradient_home::pipeline the "
                "pipeline encodes its own buffers (write there and call gradient_ready({}))",
                layout_[tensor].name, step_, tensor, tensor);
      }
      if (!begun_) begin_step();
      reported_[tensor] = 1;
      ++reported_count_;
      handed_[tensor] = grad;
      ready_.clear();
      for (auto const& [b, chunks] : flat_.buckets_of(tensor))
        if ((pending_[b] -= chunks) == 0) ready_.push_back(b);
      // In the pipeline's buffer with weight 1 there is nothing to read: the bucket goes straight
      // to its encode, which checks it (its buffer's last encode is done: begin_step waited).
      bool const in_place = !owned_grads_.empty() && in_force_.get(step_).weight == 1.0f;
      if (in_place)
        for (std::size_t b : ready_) finite_[this->finite_slot({step_, b})] = 0;
      stages_.push_encode(step_, ready_, !in_place);
    });
  }

  /// With options.gradients == gradient_home::pipeline: where the trainer writes this step's
  /// gradients, tensor by tensor (a GPU trainer: the destination of its device-to-host copies; a
  /// CPU trainer: where its backward writes), then hands each in with gradient_ready(i). The
  /// first call of a step begins it (as the first gradient_ready would): it waits until the
  /// encode thread is done with that buffer (staleness + 1 of them rotate, so call it every step,
  /// before backward writes). Tensor i's span is the trainer's to write until gradient_ready(i),
  /// the pipeline's from then on. Nothing is copied: the encode thread reads the gradients there.
  [[nodiscard]] std::span<std::span<float> const> gradients() {
    check_usable("gradients");
    require(options_.gradients == gradient_home::pipeline, errc::invalid_argument,
            "pipeline: gradients() needs pipeline_options::gradients = gradient_home::pipeline");
    if (!begun_) begin_step();
    lent_ = true;
    return owned_grads_[step_ % grads_.size()];
  }
  /// gradient_home::pipeline: tensor `tensor`'s gradient is in gradients()[tensor].
  void gradient_ready(std::size_t tensor) {
    check_usable("gradient_ready");
    require(options_.gradients == gradient_home::pipeline, errc::invalid_argument,
            "pipeline: gradient_ready({}) without a gradient needs gradient_home::pipeline", tensor);
    require(tensor < layout_.size(), errc::invalid_argument, "pipeline: tensor id {} outside the layout's {} tensors",
            tensor, layout_.size());
    gradient_ready(tensor, owned_grads_[step_ % grads_.size()][tensor]);
  }

  /// Ends the step whose gradients were handed in through gradient_ready (all tensors must have
  /// been). Returns once the gradients were read and the parameters hold updates 0 .. t -
  /// staleness (t: this step's index), written to the spans given to attach().
  void step() {
    std::uint64_t const t = step_;
    lend_gradients([&] {
      check_usable("step");
      detail::pipeline::check_complete(layout_, reported_, reported_count_, step_);
      std::fill(reported_.begin(), reported_.end(), std::uint8_t{0});
      reported_count_ = 0;
      begun_ = lent_ = false;
      ++step_;
      stages_.wait_read(step_, t);
    });
    auto const s = static_cast<std::uint64_t>(options_.staleness);
    publish(t + 1 > s ? t + 1 - s : 0);
  }

  /// Hands in every gradient (grads[i] for tensor i, in reverse order as backward would) and ends
  /// the step; grads[i] is read in place until it returns.
  void step(std::span<std::span<float const> const> grads) {
    check_usable("step");
    require(grads.size() == layout_.size(), errc::size_mismatch, "pipeline: {} gradients for a layout of {} tensors",
            grads.size(), layout_.size());
    for (std::size_t k = grads.size(); k-- > 0;) gradient_ready(k, grads[k]);
    step();
  }
  /// step() over a container of spans (a std::vector<std::span<float const>>).
  template <class Grads>
  requires std::is_convertible_v < Grads const&, std::span < std::span<float const>
  const >> void step(Grads const& grads) { step(std::span<std::span<float const> const>(grads)); }

  /// Waits for every update handed in so far and writes them all to the parameters (the
  /// staleness window drains); call before evaluating or at the end of training.
  void synchronize() {
    check_usable("synchronize");
    require(!begun_, errc::invalid_argument,
            "pipeline: synchronize() in the middle of step {} ({} of {} gradients handed in)", step_, reported_count_,
            layout_.size());
    publish(step_);
  }

  /// Changes the codec's values (a ratio, a bit width: what the solver's controller decides) from
  /// the next step handed in on. Call between steps, on every rank at the same step (the
  /// controller switches all ranks at one named step); frames are re-sized as needed. Error
  /// feedback carries over: what the old setting did not send stays in the residual. A checkpoint
  /// records the codec in force; restore it into a pipeline built with that value.
  void set_codec(C const& codec) {
    check_usable("set_codec");
    require(!begun_, errc::invalid_argument, "pipeline: set_codec() in the middle of step {} (call it between steps)",
            step_);
    rules::validate_codec(codec);
    codec_ = codec;
  }
  [[nodiscard]] C const& codec() const noexcept { return codec_; }

  /// Heterogeneous workers: rank r trains on `batches[r]` samples per step from the next step on.
  /// The pipeline then averages sum_r b_r g_r / sum_r b_r instead of the plain mean (each rank
  /// scales its gradient by b_r N / sum b as it is handed in; equal batches change no bit). Pass
  /// the same sizes on every rank at the same step (the solver's plan.batches): before exchanging
  /// a step with new sizes the ranks check that they agree (errc::size_mismatch on every rank).
  void set_batch_sizes(std::span<std::size_t const> batches) {
    require(!begun_, errc::invalid_argument,
            "pipeline: set_batch_sizes() in the middle of step {} (call it between steps)", step_);
    weight_ = detail::pipeline::batch_weight(batches, t_.rank(), t_.size());
    batches_id_ = detail::pipeline::batches_id(batches);
  }

  /// Runs `hook` at every step boundary from attach() on (see step_hook). Call before attach().
  void set_step_hook(std::shared_ptr<step_hook<C, transport_type>> hook) {
    require(!attached_, errc::invalid_argument, "pipeline: set_step_hook() after attach(); set the hook before");
    hook_ = std::move(hook);
  }

  /// The parameters the trainer holds now, tensor by tensor: the spans given to attach(), or with
  /// parameter_home::pipeline the pipeline's buffer of the last published update. Valid until the
  /// next step(), synchronize() or restore() (the two buffers swap; the apply thread fills the
  /// other one meanwhile). Read-only for the trainer.
  [[nodiscard]] std::span<std::span<float const> const> parameters() const noexcept { return params_.current(); }

  /// Steps completed by the trainer (calls of step()).
  [[nodiscard]] std::uint64_t steps() const noexcept { return step_; }
  /// Updates written to the trainer's parameters.
  [[nodiscard]] std::uint64_t published() const noexcept { return published_; }
  [[nodiscard]] bucket_plan const& plan() const noexcept { return plan_; }
  [[nodiscard]] layout const& model() const noexcept { return layout_; }
  [[nodiscard]] pipeline_options const& options() const noexcept { return options_; }
  [[nodiscard]] transport_type& transport() noexcept { return t_; }
  [[nodiscard]] feedback_state const& residuals() const noexcept { return *fstate_; }
  /// The id of this run, agreed at attach (rank 0 draws it) and carried by checkpoints: a restored
  /// pipeline continues the saved run's id, and every rank must continue the same run.
  [[nodiscard]] std::uint64_t run_id() const noexcept { return run_; }
  /// The report of the last step whose buckets were all applied.
  [[nodiscard]] step_report last_report() const { return stages_.last_report(); }

  /// Sends every stage sample and step report to `sink` from now on (the sink must outlive the
  /// pipeline or the next set_telemetry call). Call between steps.
  template <TelemetrySink S>
  void set_telemetry(S& sink) {
    stages_.set_sink(std::make_shared<detail::pipeline::sink_ref<S>>(sink));
  }

  /// Everything needed to continue bit-identically in a fresh process: configuration and layout
  /// identity, the run id, step counters, master and published parameters, error-feedback state,
  /// optimizer state, and the aggregated gradients not yet applied. Versioned and checksummed.
  /// Waits for the stages to finish what they can; call between steps.
  [[nodiscard]] std::vector<std::byte> save() {
    check_usable("save");
    require(!begun_, errc::invalid_argument, "pipeline: save() in the middle of step {}", step_);
    stages_.wait_idle(step_);
    bool const pending = published_ + 1 < step_;  // every bucket has applied min(step_, published_ + 1)
    std::vector<std::vector<std::byte>> optimizer;
    std::vector<bucket_sum const*> sums;
    for (auto const& bk : buckets_) {
      optimizer.push_back(bk.ostate.save());
      sums.push_back(pending ? &bk.sum : nullptr);
    }
    std::vector<std::span<float const>> kept;  // local_step's in-flight gradients
    for (std::uint64_t k = ahead_.kept_from(step_); k < step_; ++k) kept.emplace_back(grads_[k % grads_.size()]);
    return detail::pipeline::write_checkpoint(shape(), run_, step_, published_, master_, params_.current(), kept,
                                              fstate_->save(), optimizer, sums);
  }

  /// Restores save()'s bytes into a pipeline attached to the same layout with the same policies,
  /// options and world size, right after attach. Checks everything before changing anything:
  /// errc::malformed_message for damaged bytes or values a pipeline never writes,
  /// errc::size_mismatch for another configuration or layout. Writes the saved (published)
  /// parameters to the trainer's spans. Before the first exchange, every rank checks that all
  /// continue the same run from the same step (errc::size_mismatch on every rank otherwise).
  void restore(std::span<std::byte const> bytes) {
    check_usable("restore");
    require(!begun_ && step_ == 0, errc::invalid_argument,
            "pipeline: restore() into a pipeline that has run steps ({}); restore right after attach()", step_);
    stages_.wait_idle(step_);
    auto c = detail::pipeline::read_checkpoint(bytes, shape(), describe());
    feedback_state fs = *fstate_;
    fs.restore(c.feedback);
    std::vector<optimizer_state<O>> os(buckets_.size());
    for (std::size_t b = 0; b < buckets_.size(); ++b) (os[b] = buckets_[b].ostate).restore(c.buckets[b].optimizer);
    // Commit (the stage threads wait for work the trainer has not handed in).
    master_ = std::move(c.master);
    *fstate_ = std::move(fs);
    step_ = c.steps;
    published_ = c.published;
    run_ = c.run;
    ahead_.published(master_);
    for (std::size_t k = 0; k < c.kept.size(); ++k)  // into the buffers (gradients() hands them out)
      std::copy(c.kept[k].begin(), c.kept[k].end(), grads_[(ahead_.kept_from(step_) + k) % grads_.size()].begin());
    std::vector<std::uint8_t> pending(buckets_.size(), 0);
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      auto& bk = buckets_[b];
      auto& saved = c.buckets[b];
      bk.ostate = std::move(os[b]);
      pending[b] = saved.pending ? 1 : 0;
      if (saved.pending) detail::pipeline::load_pending(bk.sum, std::move(saved), bk.elements);
    }
    auto const to = params_.buffer(published_);
    for (std::size_t i = 0; i < to.size(); ++i) std::copy(c.user[i].begin(), c.user[i].end(), to[i].begin());
    params_.holds_nothing();  // the saved parameters may be a compensated view
    // The apply thread wrote owned buffers as it applied; an update the master weights hold
    // already (saved applied, not yet published) is written here, as that apply would have.
    std::uint64_t const in_master =
        std::any_of(pending.begin(), pending.end(), [](auto p) { return p != 0; }) ? step_ - 1 : step_;
    if (params_.owned() && !ahead_.active() && in_master > published_) write_parameters(master_, in_master);
    params_.make_current(published_);
    stages_.restore(step_, published_, pending);
  }

  /// "codec + feedback + optimizer over N ranks, options" for logs and error messages.
  [[nodiscard]] std::string describe() const {
    return fmt::format("{} + {} + {} over {} ranks, staleness {}, buckets of {} bytes", codec_, feedback_, opt_,
                       t_.size(), options_.staleness, options_.bucketing.cap_bytes);
  }

 private:
  using clock = detail::pipeline::clock;
  using typename machinery::bucket;
  // The machinery's buffers and loops (detail/machinery.hpp), by name.
  using machinery::codec_, machinery::in_force_, machinery::weight_, machinery::batches_id_, machinery::feedback_,
      machinery::opt_, machinery::t_, machinery::options_, machinery::group_size_, machinery::gather_frames_,
      machinery::layout_, machinery::plan_, machinery::attached_, machinery::run_, machinery::params_, machinery::flat_,
      machinery::ahead_, machinery::buckets_, machinery::fstate_, machinery::master_, machinery::grads_,
      machinery::reported_, machinery::handed_, machinery::owned_grads_, machinery::finite_, machinery::reported_count_,
      machinery::begun_, machinery::lent_, machinery::pending_, machinery::ready_, machinery::step_,
      machinery::published_, machinery::hook_, machinery::stages_;
  using machinery::encode_loop, machinery::exchange_loop, machinery::apply_loop;

  // Runs a trainer's call that lends gradients: if it throws, no read of them runs any more when
  // the error leaves the pipeline, so the trainer may free them as it unwinds.
  template <class Body>
  void lend_gradients(Body&& body) {
    try {
      body();
    } catch (...) {
      stages_.drain_reads();
      throw;
    }
  }

  void check_usable(char const* what) {
    require(attached_, errc::invalid_argument, "pipeline: {}() before attach()", what);
    stages_.rethrow_failure();
  }

  // The policies, options and world size, by their fields (never their printed form).
  [[nodiscard]] std::uint64_t config_id() const {
    // Gathered frames sum as flat does, the leader's sum otherwise: checkpoints of one do not
    // restore into the other (the hash of the leader's sum is the one it had before the choice).
    if (gather_frames_)
      return serial::hash_of(codec_, feedback_, opt_, t_.size(), options_, rules::collective_id, group_size_,
                             "gather_frames");
    return serial::hash_of(codec_, feedback_, opt_, t_.size(), options_, rules::collective_id, group_size_);
  }
  [[nodiscard]] detail::pipeline::checkpoint_shape shape() const {
    detail::pipeline::checkpoint_shape s{.config = config_id(),
                                         .layout = layout_.fingerprint(),
                                         .staleness = options_.staleness,
                                         .master = master_.size()};
    s.keeps_gradients = ahead_.is(compensation_method::local_step);
    for (auto const& u : params_.current()) s.user.push_back(u.size());
    for (auto const& bk : buckets_) {
      s.bucket_elements.push_back(bk.elements);
      s.bucket_sparse.push_back(bk.sum.sparse ? 1 : 0);
    }
    return s;
  }

  void build_buffers() {
    flat_ = detail::pipeline::flat_plan(layout_, plan_);
    auto set = detail::pipeline::make_buckets<bucket>(
        flat_, layout_, opt_, t_.size(), t_.rank(), group_size_, gather_frames_, dense_exchange,
        rules::sparse_result && options_.sparse_apply, codec_traits<C>::block_size);
    buckets_ = std::move(set.buckets);
    fstate_ = std::make_unique<feedback_state>(feedback_, set.extents, set.names);
    master_.assign(flat_.size(), 0.0f);
    grads_.assign(options_.staleness + 1, std::vector<float>(flat_.size(), 0.0f));
    owned_grads_.clear();
    if (options_.gradients == gradient_home::pipeline)
      for (auto& g : grads_) {
        auto& spans = owned_grads_.emplace_back();
        for (std::size_t i = 0; i < layout_.size(); ++i) {
          spans.push_back(flat_.contiguous(i, g));
          require(spans.back().size() == layout_[i].elements(), errc::unsupported,
                  "pipeline: tensor '{}' is split over buckets out of order, so gradient_home::pipeline cannot hand "
                  "it out as one span; use gradient_home::trainer",
                  layout_[i].name);
        }
      }
    ahead_.reset(options_.compensation, options_.staleness, flat_.size());
    reported_.assign(layout_.size(), 0);
    handed_.assign(layout_.size(), {});
    finite_.assign(grads_.size() * buckets_.size(), 0);
    pending_.assign(buckets_.size(), 0);
    stages_.reset(set.dense_bytes, t_.rank(), options_.measure_residual, ahead_.view_lag());
  }

  // The trainer starts handing in step step_'s gradients: wait until the encodes that read its
  // flat gradient buffer (step step_ - staleness - 1) are done, so its reads may write there.
  void begin_step() {
    detail::pipeline::check_step_room(step_);
    begun_ = true;
    std::size_t const nbuf = options_.staleness + 1;
    for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].chunks;
    stages_.wait_encoded(step_ + 1 > nbuf ? step_ + 1 - nbuf : 0, step_);
    if (hook_) {
      C c = codec_;
      hook_->before_encode(step_, c);
      if constexpr (requires { c.validate(); }) c.validate();
      codec_ = c;
    }
    in_force_.set(step_, {codec_, batches_id_, weight_});
  }

  // Waits (on the trainer's thread) until every bucket has applied `updates` steps, writes the
  // master parameters (or the apply thread's compensated view of them, `staleness` updates
  // ahead) to the trainer's spans and lets the apply thread go on: the one pass this thread
  // runs. One step at a time: the apply of step u waits for update u - 1 to be published, so the
  // copy never races it.
  void publish(std::uint64_t updates) {
    while (published_ < updates) {
      std::uint64_t const u = published_ + 1;
      stages_.wait_applied(u, step_);
      if (u == updates) {
        bool const ahead = ahead_.active() && step_ > u;
        if (ahead) stages_.wait_viewed(u, step_);
        // The apply thread wrote an owned buffer already, unless it holds a view the trainer
        // does not get (synchronize() with compensation on).
        if (!params_.owned() || (ahead_.active() && !ahead)) write_parameters(ahead ? ahead_.ahead() : master_, u);
        params_.make_current(u);
      }
      published_ = u;
      stages_.publish(u);
    }
  }

  // The trainer's thread writes `flat` (master weights or view) as update u's parameters.
  void write_parameters(std::vector<float> const& flat, std::uint64_t u) {
    auto const t0 = clock::now();
    auto const to = params_.buffer(u);
    for (std::size_t i = 0; i < to.size(); ++i) flat_.scatter(i, flat, to[i]);
    if (&flat == &master_)
      params_.holds_master(u);
    else
      for (std::size_t b = 0; b < buckets_.size(); ++b) params_.holds_other(b, u);
    stages_.emit(stage::publish, {step_ > 0 ? step_ - 1 : 0, 0}, stage_thread::trainer, t0,
                 detail::pipeline::seconds_since(t0), flat.size() * sizeof(float));
  }
};

template <class C, class F, class O, class T>
pipeline(C, F, O, T&&) -> pipeline<C, F, O, T, by_codec>;
template <class C, class F, class O, class T>
pipeline(C, F, O, T&&, pipeline_options) -> pipeline<C, F, O, T, by_codec>;
template <class C, class F, class O, class T, class Collective>
pipeline(C, F, O, T&&, pipeline_options, Collective) -> pipeline<C, F, O, T, Collective>;

}  // namespace sluice
