// sluice::pipeline: one object, assembled at compile time from policy values (codec, feedback,
// optimizer, transport), that turns a trainer's gradients into updated parameters. Per bucket of
// the bucket_plan it runs the three units the primitives fuse — encode (feedback + codec),
// exchange (the collective the codec calls for, aggregating as messages arrive) and apply (the
// optimizer on fp32 master weights) — on three stage threads, so that encoding bucket i + 1
// overlaps the exchange of bucket i and, with staleness s >= 1, the exchange and update of step t
// overlap the trainer's compute of step t + 1 (StellaTrain's pipelined iterations).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <sluice/bucket/layout.hpp>
#include <sluice/bucket/plan.hpp>
#include <sluice/collective/ring_allreduce.hpp>
#include <sluice/collective/scatter_reduce_allgather.hpp>
#include <sluice/collective/sparse_allgather.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/feedback/concepts.hpp>
#include <sluice/feedback/momentum_correction.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/non_finite.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/optim/step.hpp>
#include <sluice/pipeline/concepts.hpp>
#include <sluice/pipeline/staleness.hpp>
#include <sluice/transport/concepts.hpp>

#if SLUICE_HAS_OPENMP
#include <omp.h>
#endif

namespace sluice {

/// How the pipeline aggregates a compressed bucket. `by_codec` (the default) follows the codec:
/// sparse codecs (codec_traits<C>::is_sparse) use the sparse allgather, `identity` the ring
/// allreduce, every other codec the compressed scatter-reduce-allgather. Buckets that bypass
/// compression (small or 1-D tensors, bucket_options) always use the ring allreduce.
struct by_codec {};
struct by_sparse_allgather {};          ///< every rank's frame to every rank, summed in rank order
struct by_scatter_reduce_allgather {};  ///< CGX: owners reduce a chunk each, re-encode, allgather
struct by_ring_allreduce {};            ///< dense fp32 ring; the codec is not used
/// Dense fp32 sum of every bucket through the MPI library's blocking MPI_Allreduce (in place,
/// MPI_SUM), then divided by the world size like the ring: the DDP-equivalent baseline. Needs
/// sluice::identity, sluice::no_feedback and an MPI transport (MpiAllreduce: sluice::mpi_transport);
/// the call has no deadline (options.timeout does not apply to it; see mpi_transport::mpi_allreduce_sum).
struct by_mpi_allreduce {};

/// Options of a pipeline. A regular value.
struct pipeline_options {
  unsigned staleness = 0;  ///< 0, 1 or 2: the parameters step(t) leaves to the trainer hold updates 0 .. t - s
  std::size_t bucket_bytes = std::size_t{25} << 20;       ///< bytes per bucket (bucket_options::cap_bytes), > 0
  std::size_t first_bucket_bytes = std::size_t{1} << 20;  ///< bytes of the first bucket, > 0
  std::size_t bypass_below_elements = 1024;               ///< tensors with fewer elements are not compressed (CGX)
  std::size_t bypass_max_dims = 1;            ///< tensors of at most this many dimensions are not compressed
  std::uint64_t seed = 0;                     ///< job-wide seed of the random codecs and stochastic rounding
  std::chrono::milliseconds timeout{60'000};  ///< deadline of each collective call and of each wait for a peer
  bool sparse_apply = true;                   ///< sparse codecs: sum to a sparse result and step the optimizer sparsely
  bool broadcast_parameters = true;           ///< attach() copies rank 0's parameters to every rank (as DDP does)
  bool measure_residual = false;              ///< step_report::residual_norm (one read pass over the feedback state)
  int kernel_threads = 0;  ///< OpenMP threads each stage thread's kernels may use; 0: omp_get_max_threads()
  staleness_compensation compensation{};  ///< the trainer's parameters with staleness >= 1 (pipeline/staleness.hpp)
  friend bool operator==(pipeline_options const&, pipeline_options const&) = default;
};

/// Code run at step boundaries on a pipeline's own threads, set with pipeline::set_step_hook
/// before attach(); pipeline/adaptive.hpp binds the solver's controller through it. C: the
/// pipeline's codec type, Tr: its transport type.
template <class C, class Tr>
struct step_hook {
  virtual ~step_hook() = default;
  /// The exchange thread, once per step in step order, before this rank's first collective of
  /// `step` (after its first bucket is encoded): the transport may be used here, and only by this
  /// thread. A throw stops the pipeline and reaches the trainer's next call.
  virtual void before_exchange(Tr& transport, std::uint64_t step) = 0;
  /// The trainer's thread, as step `step` begins (its first gradient handed in), before any of its
  /// encodes: may change `codec`, the value step `step` and later ones run with (as set_codec).
  virtual void before_encode(std::uint64_t step, C& codec) = 0;
};

namespace detail::pipeline {

/// Type-erased telemetry sink (one virtual call per sample).
struct sink_base {
  virtual ~sink_base() = default;
  virtual void record(stage_sample const&) noexcept = 0;
  virtual void record(step_report const&) noexcept = 0;
};
template <TelemetrySink S>
struct sink_ref final : sink_base {
  S* s;
  explicit sink_ref(S& x) noexcept : s(&x) {}
  void record(stage_sample const& x) noexcept override { s->record(x); }
  void record(step_report const& x) noexcept override { s->record(x); }
};

template <class T>
inline constexpr bool dependent_false = false;

template <class F>
inline constexpr bool is_momentum_correction = std::is_same_v<F, momentum_correction>;

/// The collective tag by_codec resolves to for codec C.
template <class C, class Choice>
struct resolve_collective {
  using type = Choice;
};
template <class C>
struct resolve_collective<C, by_codec> {
  using type = std::conditional_t<
      std::is_same_v<C, identity>, by_ring_allreduce,
      std::conditional_t<codec_traits<C>::is_sparse, by_sparse_allgather, by_scatter_reduce_allgather>>;
};

inline constexpr std::uint32_t magic = 0x50504c53;  // "SLPP"
inline constexpr std::uint16_t version = 2;         // 2: the in-flight gradients of compensation_method::local_step

}  // namespace detail::pipeline

/// The assembled pipeline. C: codec, F: feedback, O: optimizer, T: transport — an rvalue is moved
/// in and owned (std::move(endpoint)); an lvalue is referred to (T deduces to a reference, for
/// engines that do not move, such as zmq_transport; it must outlive the pipeline). Collective:
/// by_codec or one of the by_* tags. Construct from values:
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
template <class C, class F, class O, class T, class Collective = by_codec>
requires Codec<C, float> && FeedbackFor<F, C, float> && Optimizer<O> && Transport<std::remove_cvref_t<T>>
class pipeline {
 public:
  using codec_type = C;
  using feedback_type = F;
  using optimizer_type = O;
  using transport_type = std::remove_cvref_t<T>;
  using collective = typename detail::pipeline::resolve_collective<C, Collective>::type;

  static constexpr bool sparse_exchange = std::is_same_v<collective, by_sparse_allgather>;
  static constexpr bool ring_exchange = std::is_same_v<collective, by_ring_allreduce>;
  static constexpr bool mpi_exchange = std::is_same_v<collective, by_mpi_allreduce>;
  static constexpr bool dense_exchange = ring_exchange || mpi_exchange;  ///< every bucket summed as fp32

  static_assert(!sparse_exchange || codec_traits<C>::is_sparse,
                "sluice::pipeline: by_sparse_allgather sums sparse frames, but this codec is dense (codec_traits<C>"
                "::is_sparse is false); use by_codec or by_scatter_reduce_allgather for quantizers");
  static_assert(!ring_exchange || std::is_same_v<F, no_feedback>,
                "sluice::pipeline: by_ring_allreduce sends the gradient exactly, so error feedback has nothing to "
                "compensate; use sluice::no_feedback{} (or a compressing codec with by_codec)");
  static_assert(!ring_exchange || std::is_same_v<C, identity>,
                "sluice::pipeline: by_ring_allreduce sends fp32 and would ignore this codec; use sluice::identity{} "
                "or by_codec to aggregate compressed frames");
  static_assert(!mpi_exchange || MpiAllreduce<transport_type>,
                "sluice::pipeline: by_mpi_allreduce calls MPI_Allreduce on the transport's communicator, but this "
                "transport is not MPI; use sluice::mpi_transport (target sluice::mpi), or by_ring_allreduce for the "
                "same dense sum over any transport");
  static_assert(!mpi_exchange || std::is_same_v<F, no_feedback>,
                "sluice::pipeline: by_mpi_allreduce sends the gradient exactly, so error feedback has nothing to "
                "compensate; use sluice::no_feedback{} (or a compressing codec with by_codec)");
  static_assert(!mpi_exchange || std::is_same_v<C, identity>,
                "sluice::pipeline: by_mpi_allreduce sums fp32 with MPI_Allreduce and would ignore this codec; use "
                "sluice::identity{} or by_codec to aggregate compressed frames");
  static_assert(
      !detail::pipeline::is_momentum_correction<F> || std::is_same_v<O, sgd>,
      "sluice::pipeline: momentum_correction (DGC) accumulates momentum before selection, so the optimizer "
      "must not keep its own; use sluice::sgd{} with momentum = 0, or sluice::residual{} with this optimizer");

  pipeline(C codec, F feedback, O optimizer, T&& transport, pipeline_options options = {}, Collective = {})
      : codec_(std::move(codec)),
        feedback_(std::move(feedback)),
        opt_(std::move(optimizer)),
        t_(std::forward<T>(transport)),
        options_(options) {
    require(options_.staleness <= 2, errc::invalid_argument,
            "pipeline: staleness {} is not supported; use 0 (synchronous), 1 or 2", options_.staleness);
    require(options_.bucket_bytes > 0 && options_.first_bucket_bytes > 0, errc::invalid_argument,
            "pipeline: bucket_bytes and first_bucket_bytes must be > 0");
    require(options_.timeout.count() > 0, errc::invalid_argument, "pipeline: timeout must be > 0");
    require(options_.kernel_threads >= 0, errc::invalid_argument, "pipeline: kernel_threads {} must be >= 0",
            options_.kernel_threads);
    opt_.validate();
    if constexpr (requires { codec_.validate(); }) codec_.validate();
    if constexpr (detail::pipeline::is_momentum_correction<F>)
      require(opt_.momentum == 0, errc::invalid_argument,
              "pipeline: momentum_correction keeps the momentum (DGC); set sgd.momentum = 0 (it is {})", opt_.momentum);
  }

  pipeline(pipeline const&) = delete;
  pipeline& operator=(pipeline const&) = delete;
  ~pipeline() { stop_threads(); }

  /// Sizes every buffer for `l` (no allocation afterwards), checks that every rank attached the
  /// same layout and options (errc::size_mismatch naming the first differing tensor, on every
  /// rank, before any gradient moves), copies rank 0's parameters to every rank when
  /// options.broadcast_parameters, and starts the stage threads. `params[i]` is tensor i's fp32
  /// parameters; the pipeline writes the updated values there inside step(). Once per pipeline.
  void attach(layout const& l, std::span<std::span<float> const> params) {
    require(!attached_, errc::invalid_argument, "pipeline: attach() was called already");
    require(params.size() == l.size(), errc::size_mismatch, "pipeline: {} parameter spans for a layout of {} tensors",
            params.size(), l.size());
    for (std::size_t i = 0; i < l.size(); ++i) {
      require(l[i].element == element_type::f32, errc::unsupported,
              "pipeline: tensor '{}' is {}; the pipeline steps fp32 parameters and gradients", l[i].name,
              to_string(l[i].element));
      require(params[i].size() == l[i].elements(), errc::size_mismatch,
              "pipeline: tensor '{}' has {} elements in the layout but {} in its parameter span", l[i].name,
              l[i].elements(), params[i].size());
    }
    layout_ = l;
    check_same_everywhere();
    plan_ = bucket_plan(l, bucket_options{.cap_bytes = options_.bucket_bytes,
                                          .first_cap_bytes = options_.first_bucket_bytes,
                                          .bypass_below_elements = options_.bypass_below_elements,
                                          .bypass_max_dims = options_.bypass_max_dims});
    user_.assign(params.begin(), params.end());
    build_buffers();
    for (std::size_t i = 0; i < user_.size(); ++i) gather(i, std::span<float const>(user_[i]), master_);
    if (options_.broadcast_parameters) broadcast_master();
    if (compensating(compensation_method::weight_prediction)) previous_ = master_;  // staleness compensation
    epoch_ = clock::now();
    attached_ = true;
    start_threads();
  }

  /// Hands in tensor `tensor`'s gradient of the current step (call it as backward produces each
  /// gradient, as DDP's hooks do). The values are copied before it returns; a bucket starts its
  /// encode and exchange as soon as all its tensors are in, while backward goes on.
  void gradient_ready(std::size_t tensor, std::span<float const> grad) {
    check_usable("gradient_ready");
    require(tensor < layout_.size(), errc::invalid_argument, "pipeline: tensor id {} outside the layout's {} tensors",
            tensor, layout_.size());
    require(grad.size() == layout_[tensor].elements(), errc::size_mismatch,
            "pipeline: gradient of tensor '{}' has {} elements, the layout says {}", layout_[tensor].name, grad.size(),
            layout_[tensor].elements());
    require(!reported_[tensor], errc::invalid_argument, "pipeline: gradient of tensor '{}' handed in twice in step {}",
            layout_[tensor].name, step_);
    if (reported_count_ == 0) begin_step();
    reported_[tensor] = 1;
    ++reported_count_;
    gather(tensor, grad, grads_[gbuf_]);
    std::vector<std::size_t> ready;
    for (auto const& [b, chunks] : tensor_buckets_[tensor]) {
      pending_[b] -= chunks;
      if (pending_[b] == 0) ready.push_back(b);
    }
    if (!ready.empty()) {
      std::lock_guard lock(m_);
      for (std::size_t b : ready) encode_queue_.push_back({step_, b});
    }
    if (!ready.empty()) cv_.notify_all();
  }

  /// Ends the step whose gradients were handed in through gradient_ready (all tensors must have
  /// been). Returns once the parameters hold updates 0 .. t - staleness (t: this step's index),
  /// written to the spans given to attach().
  void step() {
    check_usable("step");
    require(reported_count_ == layout_.size(), errc::invalid_argument,
            "pipeline: step {} ended with {} of {} gradients handed in (first missing: '{}')", step_, reported_count_,
            layout_.size(), first_missing());
    std::uint64_t const t = step_;
    std::fill(reported_.begin(), reported_.end(), std::uint8_t{0});
    reported_count_ = 0;
    ++step_;
    auto const s = static_cast<std::uint64_t>(options_.staleness);
    publish(t + 1 > s ? t + 1 - s : 0);
  }

  /// Hands in every gradient (grads[i] for tensor i, in reverse order as backward would) and ends the step.
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
    require(reported_count_ == 0, errc::invalid_argument,
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
    require(reported_count_ == 0, errc::invalid_argument,
            "pipeline: set_codec() in the middle of step {} (call it between steps)", step_);
    if constexpr (requires { codec.validate(); }) codec.validate();
    codec_ = codec;
  }
  [[nodiscard]] C const& codec() const noexcept { return codec_; }

  /// Runs `hook` at every step boundary from attach() on (see step_hook). Call before attach().
  void set_step_hook(std::shared_ptr<step_hook<C, transport_type>> hook) {
    require(!attached_, errc::invalid_argument, "pipeline: set_step_hook() after attach(); set the hook before");
    hook_ = std::move(hook);
  }

  /// Steps completed by the trainer (calls of step()).
  [[nodiscard]] std::uint64_t steps() const noexcept { return step_; }
  /// Updates written to the trainer's parameters.
  [[nodiscard]] std::uint64_t published() const noexcept { return published_; }
  [[nodiscard]] bucket_plan const& plan() const noexcept { return plan_; }
  [[nodiscard]] layout const& model() const noexcept { return layout_; }
  [[nodiscard]] pipeline_options const& options() const noexcept { return options_; }
  [[nodiscard]] transport_type& transport() noexcept { return t_; }
  [[nodiscard]] feedback_state const& residuals() const noexcept { return *fstate_; }
  /// The report of the last step whose buckets were all applied.
  [[nodiscard]] step_report last_report() const {
    std::lock_guard lock(m_);
    return last_report_;
  }

  /// Sends every stage sample and step report to `sink` from now on (the sink must outlive the
  /// pipeline or the next set_telemetry call). Call between steps.
  template <TelemetrySink S>
  void set_telemetry(S& sink) {
    auto p = std::make_shared<detail::pipeline::sink_ref<S>>(sink);
    std::lock_guard lock(m_);
    sink_ = std::move(p);
  }

  /// Everything needed to continue bit-identically in a fresh process: configuration and layout
  /// fingerprints, step counters, master and published parameters, error-feedback state, optimizer
  /// state, and the aggregated gradients not yet applied. Versioned and checksummed. Waits for the
  /// stages to finish what they can; call between steps.
  [[nodiscard]] std::vector<std::byte> save() {
    check_usable("save");
    require(reported_count_ == 0, errc::invalid_argument, "pipeline: save() in the middle of step {}", step_);
    wait_idle();
    std::vector<std::byte> out;
    using serial::put;
    put<std::uint32_t>(out, detail::pipeline::magic);
    put<std::uint16_t>(out, detail::pipeline::version);
    put<std::uint16_t>(out, 0);
    put<std::uint64_t>(out, config_hash());
    put<std::uint64_t>(out, layout_.fingerprint());
    put<std::uint64_t>(out, step_);
    put<std::uint64_t>(out, published_);
    put_floats(out, master_);
    for (auto const& u : user_) put_floats(out, std::span<float const>(u));
    if (compensating(compensation_method::local_step))  // staleness compensation: in-flight gradients
      for (std::uint64_t k = kept_from(); k < step_; ++k)
        put_floats(out, std::span<float const>(grads_[static_cast<std::size_t>(k % (options_.staleness + 1))]));
    put_blob(out, fstate_->save());
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      auto& bk = buckets_[b];
      put_blob(out, bk.ostate.save());
      bool const pending = bk.applied < bk.exchanged;
      put<std::uint8_t>(out, pending ? 1 : 0);
      if (!pending) continue;
      if (bk.sparse_result) {
        put<std::uint64_t>(out, bk.sparse_sum.block_size());
        put<std::uint64_t>(out, bk.sparse_sum.nnz());
        auto const idx = bk.sparse_sum.indices();
        serial::append(out, std::as_bytes(idx));
        put_floats(out, std::span<float const>(bk.sparse_sum.values()));
      } else {
        put_floats(out, std::span<float const>(bk.dense_sum));
      }
    }
    put<std::uint64_t>(out, serial::stable_hash(out));
    return out;
  }

  /// Restores save()'s bytes into a pipeline attached to the same layout with the same policies,
  /// options and world size. Checks everything before changing anything: errc::malformed_message
  /// for damaged bytes (checksum, truncation), errc::size_mismatch for another configuration or
  /// layout. Writes the saved (published) parameters to the trainer's spans.
  void restore(std::span<std::byte const> bytes) {
    check_usable("restore");
    require(reported_count_ == 0 && step_ == 0, errc::invalid_argument,
            "pipeline: restore() into a pipeline that has run steps ({}); restore right after attach()", step_);
    wait_idle();
    require(bytes.size() >= 8, errc::malformed_message, "pipeline checkpoint: {} bytes is truncated", bytes.size());
    std::uint64_t sum = 0;
    std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
    require(serial::stable_hash(bytes.first(bytes.size() - 8)) == sum, errc::malformed_message,
            "pipeline checkpoint: checksum mismatch (the file is damaged or not a pipeline checkpoint)");
    serial::reader r(bytes.first(bytes.size() - 8));
    std::uint32_t mg = 0;
    std::uint16_t ver = 0, zero = 0;
    std::uint64_t cfg = 0, fp = 0, steps = 0, published = 0;
    bool ok = r.get(mg) && r.get(ver) && r.get(zero) && r.get(cfg) && r.get(fp) && r.get(steps) && r.get(published);
    require(ok && mg == detail::pipeline::magic, errc::malformed_message, "pipeline checkpoint: bad header");
    require(ver == detail::pipeline::version, errc::malformed_message,
            "pipeline checkpoint: version {} is not supported (this reader: {})", ver, detail::pipeline::version);
    require(cfg == config_hash(), errc::size_mismatch,
            "pipeline checkpoint: saved by a pipeline with other policies, options or world size (this one: {})",
            describe());
    require(fp == layout_.fingerprint(), errc::size_mismatch,
            "pipeline checkpoint: saved for another layout (fingerprint {:016x}, this layout {:016x})", fp,
            layout_.fingerprint());
    require(published <= steps, errc::malformed_message, "pipeline checkpoint: {} updates published of {} steps",
            published, steps);
    // Parse into temporaries first; commit only when everything checked out.
    std::vector<float> master(master_.size());
    ok = get_floats(r, master);
    std::vector<std::vector<float>> user(user_.size());
    for (std::size_t i = 0; ok && i < user_.size(); ++i) {
      user[i].resize(user_[i].size());
      ok = get_floats(r, user[i]);
    }
    std::vector<std::vector<float>> kept;  // staleness compensation (local_step): in-flight gradients
    if (compensating(compensation_method::local_step))
      for (std::uint64_t k = steps + 1 > options_.staleness ? steps + 1 - options_.staleness : 0; ok && k < steps;
           ++k) {
        kept.emplace_back(master_.size());
        ok = get_floats(r, kept.back());
      }
    std::span<std::byte const> fblob;
    ok = ok && get_blob(r, fblob);
    require(ok, errc::malformed_message, "pipeline checkpoint: truncated parameters");
    feedback_state fs = *fstate_;
    fs.restore(fblob);
    std::vector<optimizer_state<O>> os;
    struct pending_sum {
      bool pending = false;
      std::vector<std::uint32_t> idx;
      std::vector<float> values;
      std::size_t block = 1;
    };
    std::vector<pending_sum> sums(buckets_.size());
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      std::span<std::byte const> oblob;
      std::uint8_t pending = 0;
      require(get_blob(r, oblob) && r.get(pending) && pending <= 1, errc::malformed_message,
              "pipeline checkpoint: bucket {} is truncated", b);
      os.push_back(buckets_[b].ostate);
      os.back().restore(oblob);
      auto& ps = sums[b];
      ps.pending = pending == 1;
      if (!ps.pending) continue;
      if (buckets_[b].sparse_result) {
        std::uint64_t block = 0, nnz = 0;
        require(r.get(block) && r.get(nnz) && block >= 1 && nnz <= buckets_[b].elements &&
                    nnz * block <= buckets_[b].elements,
                errc::malformed_message, "pipeline checkpoint: bucket {}: bad pending sparse sum", b);
        ps.block = block;
        ps.idx.resize(nnz);
        std::span<std::byte const> raw;
        ps.values.resize(nnz * block);
        require(r.take(nnz * sizeof(std::uint32_t), raw) && get_floats(r, ps.values), errc::malformed_message,
                "pipeline checkpoint: bucket {}: truncated pending sparse sum", b);
        std::memcpy(ps.idx.data(), raw.data(), raw.size());
        sparse_view<float const> const v{ps.idx, ps.values, buckets_[b].elements, ps.block};
        v.validate("pipeline checkpoint");
      } else {
        ps.values.resize(buckets_[b].elements);
        require(get_floats(r, ps.values), errc::malformed_message,
                "pipeline checkpoint: bucket {}: truncated pending sum", b);
      }
    }
    require(r.left() == 0, errc::malformed_message, "pipeline checkpoint: {} trailing bytes", r.left());
    // Commit.
    std::lock_guard lock(m_);
    master_ = std::move(master);
    *fstate_ = std::move(fs);
    step_ = steps;
    published_ = published;
    if (compensating(compensation_method::weight_prediction)) previous_ = master_;  // staleness compensation
    for (std::size_t j = 0; j < kept.size(); ++j)  // staleness compensation (local_step)
      grads_[static_cast<std::size_t>((kept_from() + j) % (options_.staleness + 1))] = std::move(kept[j]);
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      auto& bk = buckets_[b];
      bk.ostate = std::move(os[b]);
      bk.encoded = bk.exchanged = steps;
      bk.applied = sums[b].pending ? steps - 1 : steps;
      if (!sums[b].pending) continue;
      if (bk.sparse_result) {
        bk.sparse_sum.reset(bk.elements, sums[b].block);
        bk.sparse_sum.resize_for_overwrite(sums[b].idx.size());
        std::copy(sums[b].idx.begin(), sums[b].idx.end(), bk.sparse_sum.indices().begin());
        std::copy(sums[b].values.begin(), sums[b].values.end(), bk.sparse_sum.values().begin());
      } else {
        bk.dense_sum = std::move(sums[b].values);
      }
      apply_queue_.push_back({steps - 1, b});
    }
    for (std::size_t i = 0; i < user_.size(); ++i) std::copy(user[i].begin(), user[i].end(), user_[i].begin());
    cv_.notify_all();
  }

  /// "codec + feedback + optimizer over N ranks, options" for logs and error messages.
  [[nodiscard]] std::string describe() const {
    return fmt::format("{} + {} + {} over {} ranks, staleness {}, buckets of {} bytes", codec_, feedback_, opt_,
                       t_.size(), options_.staleness, options_.bucket_bytes);
  }

 private:
  using clock = std::chrono::steady_clock;

  // One bucket: where its elements sit in the flat buffers, its buffers and its progress counters
  // (steps whose encode / exchange / apply have finished).
  struct bucket_state {
    std::size_t id = 0, first = 0, elements = 0;
    bool compressed = true, sparse_result = false;
    std::size_t total_chunks = 0;
    optimizer_state<O> ostate;
    feedback_workspace<C, float> fws{};
    std::vector<std::byte> frame{};               // sparse allgather: this rank's frame
    std::vector<std::vector<std::byte>> parts{};  // scatter-reduce-allgather: one frame per owner
    std::vector<std::span<std::byte const>> part_views{};
    std::vector<float> staged{};     // uncompressed buckets: the gradient, until the exchange takes it
    std::vector<float> dense_sum{};  // the aggregated gradient, until the apply takes it
    sparse_buffer<float> sparse_sum{};
    sparse_allgather_workspace<C> aws{};
    scatter_reduce_allgather_workspace<C> sws{};
    ring_allreduce_workspace rws{};
    std::size_t encoded_bytes = 0, sent_bytes = 0;
    double encode_s = 0, exchange_s = 0, apply_s = 0, residual_sq = 0;
    std::uint64_t encoded = 0, exchanged = 0, applied = 0;
    explicit bucket_state(optimizer_state<O> s) : ostate(std::move(s)) {}
  };
  struct placement {
    std::size_t offset = 0, flat = 0, count = 0;  // tensor elements [offset, offset + count) at flat[flat ...]
  };
  struct work {
    std::uint64_t step = 0;
    std::size_t bucket = 0;
  };

  void check_usable(char const* what) {
    require(attached_, errc::invalid_argument, "pipeline: {}() before attach()", what);
    rethrow_failure();
  }
  void rethrow_failure() {
    std::lock_guard lock(m_);
    if (failure_) std::rethrow_exception(failure_);
  }
  [[nodiscard]] std::string first_missing() const {
    for (std::size_t i = 0; i < reported_.size(); ++i)
      if (!reported_[i]) return layout_[i].name;
    return {};
  }

  // Ranks exchange (layout, configuration) with rank 0 before anything else moves; rank 0 replies
  // with a verdict, so every rank throws the same clear error.
  void check_same_everywhere() {
    int const n = t_.size(), r = t_.rank();
    if (n == 1) return;
    deadline const d = deadline::after(options_.timeout);
    std::vector<std::byte> mine = layout_.serialize();
    serial::put<std::uint64_t>(mine, config_hash());
    message_tag const tag = attach_tag;
    std::vector<std::byte> buf;
    char const* const what = "pipeline::attach";
    collective_context const ctx{.timeout = options_.timeout, .tag = tag};
    if (r != 0) {
      detail::send_set<transport_type> sends(t_, 1);  // settled on every way out: `mine` dies here
      sends.start(0, tag, mine, what, ctx);
      auto const verdict = t_.recv(0, tag + 1, buf, d);
      sends.wait_all(d, what, ctx);
      require(!verdict.empty(), errc::malformed_message, "pipeline::attach: empty verdict from rank 0");
      if (verdict[0] == std::byte{0}) return;
      std::string const text(reinterpret_cast<char const*>(verdict.data()) + 1, verdict.size() - 1);
      throw_error(static_cast<errc>(static_cast<int>(verdict[0])), "{}", text);
    }
    std::vector<std::byte> verdict{std::byte{0}};
    for (int p = 1; p < n; ++p) {
      auto const theirs = t_.recv(p, tag, buf, d);
      if (verdict[0] != std::byte{0}) continue;
      try {
        require(theirs.size() >= 8, errc::malformed_message, "pipeline::attach: rank {} sent a truncated layout", p);
        auto const lay = theirs.first(theirs.size() - 8);
        layouts_must_match(std::span<std::byte const>(mine).first(mine.size() - 8), 0, lay, p);
        std::uint64_t cfg = 0;
        std::memcpy(&cfg, theirs.data() + theirs.size() - 8, 8);
        require(cfg == config_hash(), errc::size_mismatch,
                "pipeline::attach: rank {} was built with other policies, options or world size than rank 0 ({})", p,
                describe());
      } catch (error const& e) {
        std::string const text = e.what();
        verdict.assign(1, static_cast<std::byte>(static_cast<int>(e.kind())));
        auto const* c = reinterpret_cast<std::byte const*>(text.data());
        verdict.insert(verdict.end(), c, c + text.size());
      }
    }
    {
      detail::send_set<transport_type> sends(t_, static_cast<std::size_t>(n - 1));
      for (int p = 1; p < n; ++p) sends.start(p, tag + 1, verdict, what, ctx);
      sends.wait_all(d, what, ctx);
    }
    if (verdict[0] != std::byte{0}) {
      std::string const text(reinterpret_cast<char const*>(verdict.data()) + 1, verdict.size() - 1);
      throw_error(static_cast<errc>(static_cast<int>(verdict[0])), "{}", text);
    }
  }

  // Rank 0's parameters to every rank, in messages of at most broadcast_chunk floats (engines
  // bound a message's size: zmq_options::max_message_bytes), in order on one tag.
  void broadcast_master() {
    int const n = t_.size(), r = t_.rank();
    if (n == 1) return;
    deadline const d = deadline::after(options_.timeout);
    constexpr std::size_t broadcast_chunk = std::size_t{4} << 20;  // 16 MiB of fp32
    char const* const what = "pipeline::attach (parameters)";
    collective_context const ctx{.timeout = options_.timeout, .tag = attach_tag + 2};
    std::vector<std::byte> buf;
    for (std::size_t at = 0; at < master_.size(); at += broadcast_chunk) {
      auto const part = std::span<float>(master_).subspan(at, std::min(broadcast_chunk, master_.size() - at));
      if (r == 0) {
        detail::send_set<transport_type> sends(t_, static_cast<std::size_t>(n - 1));
        for (int p = 1; p < n; ++p) sends.start(p, attach_tag + 2, std::as_bytes(part), what, ctx);
        sends.wait_all(d, what, ctx);
      } else {
        auto const got = t_.recv(0, attach_tag + 2, buf, d);
        require(got.size() == part.size_bytes(), errc::malformed_message,
                "pipeline::attach: rank 0 sent {} bytes of parameters at element {}, {} expected", got.size(), at,
                part.size_bytes());
        std::memcpy(part.data(), got.data(), got.size());
      }
    }
    for (std::size_t i = 0; i < user_.size(); ++i) scatter(i, master_, user_[i]);
  }

  [[nodiscard]] std::uint64_t config_hash() const {
    std::string const s =
        fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", codec_, feedback_, opt_, t_.size(), options_.staleness,
                    options_.bucket_bytes, options_.first_bucket_bytes, options_.bypass_below_elements,
                    options_.bypass_max_dims, options_.seed, options_.sparse_apply, options_.compensation);
    return serial::stable_hash(std::as_bytes(std::span<char const>(s.data(), s.size())));
  }

  void build_buffers() {
    std::size_t flat = 0;
    placements_.assign(layout_.size(), {});
    tensor_buckets_.assign(layout_.size(), {});
    std::vector<std::size_t> extents;
    std::vector<std::string> names;
    for (auto const& b : plan_.buckets()) {
      bucket_state bk(optimizer_state<O>(opt_, b.elements, static_cast<std::uint32_t>(b.id)));
      bk.id = b.id;
      bk.first = flat;
      bk.elements = b.elements;
      bk.compressed = b.compressed && !dense_exchange;
      bk.sparse_result = bk.compressed && sparse_exchange && options_.sparse_apply;
      bk.total_chunks = b.chunk_count;
      std::size_t at = flat;
      for (auto const& c : plan_.chunks_of(b)) {
        placements_[c.tensor].push_back({c.offset, at, c.count});
        auto& tb = tensor_buckets_[c.tensor];
        if (tb.empty() || tb.back().first != b.id)
          tb.push_back({b.id, 1});
        else
          ++tb.back().second;
        at += c.count;
      }
      int const w = t_.size();
      if (bk.compressed) {
        if constexpr (sparse_exchange) {
          bk.frame.resize(codec_.max_encoded_bytes(b.elements));
        } else if constexpr (!dense_exchange) {
          bk.parts.resize(static_cast<std::size_t>(w));
          for (int j = 0; j < w; ++j)
            bk.parts[static_cast<std::size_t>(j)].resize(
                codec_.max_encoded_bytes(scatter_reduce_allgather_part(b.elements, w, j).count));
        }
      }
      if (!bk.compressed) bk.staged.assign(b.elements, 0.0f);
      bk.part_views.resize(bk.parts.size());
      if (bk.sparse_result)
        bk.sparse_sum.reset(b.elements, codec_traits<C>::block_size);
      else
        bk.dense_sum.assign(b.elements, 0.0f);
      extents.push_back(b.elements);
      names.push_back(fmt::format("bucket {}", b.id));
      flat += b.elements;
      buckets_.push_back(std::move(bk));
    }
    fstate_ = std::make_unique<feedback_state>(feedback_, extents, names);
    master_.assign(flat, 0.0f);
    std::size_t const nbuf = options_.staleness + 1;
    grads_.assign(nbuf, std::vector<float>(flat, 0.0f));
    // --- staleness compensation (pipeline/staleness.hpp): its buffers ---
    if (compensating()) ahead_.assign(flat, 0.0f);
    if (compensating(compensation_method::local_step))
      for (auto const& bk : buckets_) ahead_state_.push_back(bk.ostate);
    reported_.assign(layout_.size(), 0);
    pending_.assign(buckets_.size(), 0);
  }

  // Copies tensor i's values into (gather) or out of (scatter) a flat buffer in plan order.
  void gather(std::size_t i, std::span<float const> src, std::vector<float>& flat) const {
    for (auto const& p : placements_[i]) std::memcpy(flat.data() + p.flat, src.data() + p.offset, p.count * 4);
  }
  void scatter(std::size_t i, std::vector<float> const& flat, std::span<float> dst) const {
    for (auto const& p : placements_[i]) std::memcpy(dst.data() + p.offset, flat.data() + p.flat, p.count * 4);
  }

  // The trainer starts handing in step step_'s gradients: pick its gradient buffer, wait until the
  // encodes that read that buffer (step step_ - staleness - 1) are done.
  void begin_step() {
    std::size_t const nbuf = options_.staleness + 1;
    gbuf_ = static_cast<std::size_t>(step_ % nbuf);
    for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].total_chunks;
    std::uint64_t const need = step_ + 1 > nbuf ? step_ + 1 - nbuf : 0;
    wait_for([&] {
      for (auto const& bk : buckets_)
        if (bk.encoded < need) return false;
      return true;
    });
    if (hook_) {
      C c = codec_;
      hook_->before_encode(step_, c);
      if constexpr (requires { c.validate(); }) c.validate();
      codec_ = c;
    }
    // Steps in flight are at most staleness + 2 <= 4 apart, and step - 4 has left the exchange.
    std::lock_guard lock(m_);
    codec_ring_[step_ % codec_ring_.size()] = codec_;
  }
  [[nodiscard]] C codec_of(std::uint64_t step) const {
    std::lock_guard lock(m_);
    return codec_ring_[step % codec_ring_.size()];
  }

  // Waits (on the trainer's thread) until every bucket has applied `updates` steps, writes the
  // master parameters to the trainer's spans and lets the apply thread go on. One step at a time:
  // the apply of step u waits for update u - 1 to be published, so the copy never races it.
  void publish(std::uint64_t updates) {
    while (published_ < updates) {
      std::uint64_t const u = published_ + 1;
      wait_for([&] {
        for (auto const& bk : buckets_)
          if (bk.applied < u) return false;
        return true;
      });
      if (u == updates) {
        std::vector<float> const& out = compensated(u);  // staleness compensation: master_ or its estimate ahead
        for (std::size_t i = 0; i < user_.size(); ++i) scatter(i, out, user_[i]);
      }
      if (compensating(compensation_method::weight_prediction)) previous_ = master_;  // staleness compensation
      {
        std::lock_guard lock(m_);
        published_ = u;
      }
      cv_.notify_all();
    }
  }

  // --- staleness compensation (pipeline/staleness.hpp) -------------------------------------------
  // The parameters handed to the trainer when the master weights hold `updates` updates and the
  // steps updates .. step_ - 1 are still in flight (staleness of them; none after synchronize()).
  // Runs on the trainer's thread inside publish(), while no apply can run (the apply of update
  // `updates` waits for published_ to reach it), so master_ and every bucket's state are still.
  [[nodiscard]] bool compensating() const noexcept {
    return options_.staleness > 0 && options_.compensation.method != compensation_method::none;
  }
  [[nodiscard]] bool compensating(compensation_method m) const noexcept {
    return compensating() && options_.compensation.method == m;
  }
  std::vector<float> const& compensated(std::uint64_t updates) {
    std::uint64_t const ahead = step_ - updates;
    if (!compensating() || ahead == 0) return master_;
    if (options_.compensation.method == compensation_method::weight_prediction) {
      auto const k = static_cast<float>(ahead);
      for (std::size_t i = 0; i < master_.size(); ++i) ahead_[i] = master_[i] + k * (master_[i] - previous_[i]);
      return ahead_;
    }
    ahead_ = master_;
    std::size_t const nbuf = options_.staleness + 1;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      auto const& bk = buckets_[b];
      ahead_state_[b] = bk.ostate;
      std::span<float> const params(ahead_.data() + bk.first, bk.elements);
      for (std::uint64_t k = updates; k < step_; ++k)
        sluice::step(opt_, ahead_state_[b], params,
                     std::span<float const>(grads_[static_cast<std::size_t>(k % nbuf)]).subspan(bk.first, bk.elements));
    }
    return ahead_;
  }
  // The gradients of steps step_ - staleness + 1 .. step_ - 1, which a later publish() steps
  // ahead with (local_step); saved in checkpoints.
  [[nodiscard]] std::uint64_t kept_from() const noexcept {
    auto const s = static_cast<std::uint64_t>(options_.staleness);
    return step_ + 1 > s ? step_ + 1 - s : 0;
  }

  // Waits until no stage can make progress without the trainer (every handed-in step encoded and
  // exchanged, every allowed apply done).
  void wait_idle() {
    wait_for([&] {
      for (auto const& bk : buckets_)
        if (bk.encoded < step_ || bk.exchanged < step_ || bk.applied < std::min<std::uint64_t>(step_, published_ + 1))
          return false;
      return true;
    });
  }

  template <class Pred>
  void wait_for(Pred&& ready) {
    auto const t0 = clock::now();
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return failure_ || ready(); });
      if (failure_) std::rethrow_exception(failure_);
    }
    double const waited = seconds_since(t0);
    wait_seconds_ += waited;
    if (waited > 0)
      emit(stage_sample{.which = stage::wait,
                        .step = step_,
                        .bucket = 0,
                        .rank = t_.rank(),
                        .thread = 0,
                        .start = at(t0),
                        .seconds = waited,
                        .bytes = 0});
  }

  // --- stage threads -----------------------------------------------------------------------------

  static constexpr message_tag attach_tag{tag_limit - 64};

  void start_threads() {
    threads_.emplace_back([this] { run_stage(1, [this] { encode_loop(); }); });
    threads_.emplace_back([this] { run_stage(2, [this] { exchange_loop(); }); });
    threads_.emplace_back([this] { run_stage(3, [this] { apply_loop(); }); });
  }
  void stop_threads() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& th : threads_)
      if (th.joinable()) th.join();
    threads_.clear();
  }
  template <class Loop>
  void run_stage(int, Loop&& loop) {
#if SLUICE_HAS_OPENMP
    if (options_.kernel_threads > 0) omp_set_num_threads(options_.kernel_threads);
#endif
    try {
      loop();
    } catch (...) {
      {
        std::lock_guard lock(m_);
        if (!failure_) failure_ = std::current_exception();
      }
      cv_.notify_all();
    }
  }
  // Blocks until `ready()` or stop; false on stop (or a failure elsewhere).
  template <class Pred>
  bool stage_wait(std::unique_lock<std::mutex>& lock, Pred&& ready) {
    cv_.wait(lock, [&] { return stop_ || failure_ || ready(); });
    return !(stop_ || failure_);
  }
  [[nodiscard]] collective_context context(std::uint64_t step, std::size_t b) const {
    return {.step = step,
            .tensor = b,
            .seed = options_.seed,
            .timeout = options_.timeout,
            .tag = message_tag{static_cast<std::uint32_t>(tags_per_collective * (1 + b % 4096))}};
  }

  void encode_loop() {
    for (;;) {
      std::size_t b = 0;
      std::uint64_t step = 0;
      std::vector<float> const* g = nullptr;
      {
        std::unique_lock lock(m_);
        if (!stage_wait(lock, [&] {
              if (encode_queue_.empty()) return false;
              auto const& w = encode_queue_.front();
              return buckets_[w.bucket].exchanged >= w.step;  // the frame of the previous step has left
            }))
          return;
        b = encode_queue_.front().bucket;
        step = encode_queue_.front().step;
        encode_queue_.pop_front();
        g = &grads_[static_cast<std::size_t>(step % (options_.staleness + 1))];
      }
      auto& bk = buckets_[b];
      C const codec = codec_of(step);
      auto const t0 = clock::now();
      std::span<float const> const grad(g->data() + bk.first, bk.elements);
      std::size_t bytes = 0;
      if (bk.compressed) {
        collective_context const ctx = context(step, b);
        if constexpr (sparse_exchange) {
          bk.frame.resize(codec.max_encoded_bytes(bk.elements));
          bytes = feedback_.encode(codec, fstate_->slice(b), grad, ctx.for_rank(t_.rank()), bk.fws, bk.frame);
          require(bytes > 0, errc::non_finite,
                  "pipeline: step {} bucket {}: the feedback skipped the gradient (non-finite values); the pipeline "
                  "needs non_finite_policy::throw_error or propagate",
                  step, b);
          bk.frame.resize(bytes);
        } else if constexpr (!dense_exchange) {
          int const w = t_.size();
          for (int j = 0; j < w; ++j) {
            auto const part = scatter_reduce_allgather_part(bk.elements, w, j);
            auto& frame = bk.parts[static_cast<std::size_t>(j)];
            frame.resize(codec.max_encoded_bytes(part.count));
            std::size_t const n =
                feedback_.encode(codec, fstate_->slice(b, part.first, part.count), grad.subspan(part.first, part.count),
                                 ctx.for_rank(t_.rank(), 1 + static_cast<std::uint64_t>(j)), bk.fws, frame);
            require(n > 0 || part.count == 0, errc::non_finite,
                    "pipeline: step {} bucket {}: the feedback skipped the gradient (non-finite values); the pipeline "
                    "needs non_finite_policy::throw_error or propagate",
                    step, b);
            frame.resize(n);
            bytes += n;
          }
        }
      } else {
        std::size_t const bad = first_non_finite(grad);
        require(bad == std::size_t(-1) || feedback_.non_finite == non_finite_policy::propagate, errc::non_finite,
                "pipeline: step {} bucket {} (uncompressed): gradient element {} is {}", step, b, bad,
                bad == std::size_t(-1) ? 0.0f : grad[bad]);
        std::copy(grad.begin(), grad.end(), bk.staged.begin());
        bytes = bk.elements * sizeof(float);
      }
      double const residual_sq = options_.measure_residual ? residual_squares(b) : 0.0;
      double const secs = seconds_since(t0);
      emit(stage_sample{.which = stage::encode,
                        .step = step,
                        .bucket = b,
                        .rank = t_.rank(),
                        .thread = 1,
                        .start = at(t0),
                        .seconds = secs,
                        .bytes = bytes});
      {
        std::lock_guard lock(m_);
        bk.encoded_bytes = bytes;
        bk.encode_s = secs;
        bk.residual_sq = residual_sq;
        bk.encoded = step + 1;
      }
      cv_.notify_all();
    }
  }

  void exchange_loop() {
    std::uint64_t hooked = 0;  // steps the step hook has run for
    for (std::uint64_t step = 0;; ++step) {
      for (std::size_t b = 0; b < buckets_.size(); ++b) {
        {
          std::unique_lock lock(m_);
          if (!stage_wait(lock, [&] {
                auto const& bk = buckets_[b];
                return bk.exchanged > step || (bk.encoded > step && bk.applied >= step);
              }))
            return;
          if (buckets_[b].exchanged > step) continue;  // restored past it
        }
        if (hook_ && hooked <= step) {
          hook_->before_exchange(t_, step);
          hooked = step + 1;
        }
        auto& bk = buckets_[b];
        C const codec = codec_of(step);
        auto const t0 = clock::now();
        collective_context const ctx = context(step, b);
        std::size_t sent = 0;
        if (!bk.compressed) {
          std::copy(bk.staged.begin(), bk.staged.end(), bk.dense_sum.begin());
          if constexpr (mpi_exchange) {
            // MPI does not say what it sent: report the bandwidth-optimal volume 2 (N - 1) / N * 4n.
            if (t_.size() > 1) t_.mpi_allreduce_sum(std::span<float>(bk.dense_sum));
            auto const w = static_cast<std::size_t>(t_.size());
            sent = 2 * (w - 1) * bk.elements * sizeof(float) / w;
          } else {
            ring_allreduce(t_, std::span<float>(bk.dense_sum), ctx, bk.rws);
            sent = ring_allreduce_bytes(bk.elements, t_.size());
          }
        } else if constexpr (sparse_exchange) {
          if (bk.sparse_result)
            sparse_allgather_encoded(t_, codec, std::span<std::byte const>(bk.frame), bk.elements, bk.sparse_sum, ctx,
                                     bk.aws);
          else
            sparse_allgather_encoded(t_, codec, std::span<std::byte const>(bk.frame), std::span<float>(bk.dense_sum),
                                     ctx, bk.aws);
          sent = bk.aws.sent_bytes;
        } else if constexpr (!dense_exchange) {
          std::copy(bk.parts.begin(), bk.parts.end(), bk.part_views.begin());
          scatter_reduce_allgather_encoded(t_, codec, std::span<std::span<std::byte const> const>(bk.part_views),
                                           std::span<float>(bk.dense_sum), ctx, bk.sws);
          sent = bk.sws.sent_bytes;
        }
        double const secs = seconds_since(t0);
        emit(stage_sample{.which = stage::exchange,
                          .step = step,
                          .bucket = b,
                          .rank = t_.rank(),
                          .thread = 2,
                          .start = at(t0),
                          .seconds = secs,
                          .bytes = sent});
        {
          std::lock_guard lock(m_);
          bk.sent_bytes = sent;
          bk.exchange_s = secs;
          bk.exchanged = step + 1;
          apply_queue_.push_back({step, b});
        }
        cv_.notify_all();
      }
    }
  }

  void apply_loop() {
    for (;;) {
      work w;
      {
        std::unique_lock lock(m_);
        if (!stage_wait(lock, [&] { return !apply_queue_.empty() && published_ >= apply_queue_.front().step; })) return;
        w = apply_queue_.front();
        apply_queue_.pop_front();
      }
      auto& bk = buckets_[w.bucket];
      auto const t0 = clock::now();
      float const world = static_cast<float>(t_.size());
      std::span<float> const params(master_.data() + bk.first, bk.elements);
      if (bk.sparse_result) {
        for (float& x : bk.sparse_sum.values()) x /= world;
        sluice::step(opt_, bk.ostate, params, bk.sparse_sum.view());
      } else {
        for (float& x : bk.dense_sum) x /= world;
        sluice::step(opt_, bk.ostate, params, std::span<float const>(bk.dense_sum));
      }
      double const secs = seconds_since(t0);
      emit(stage_sample{.which = stage::apply,
                        .step = w.step,
                        .bucket = w.bucket,
                        .rank = t_.rank(),
                        .thread = 3,
                        .start = at(t0),
                        .seconds = secs,
                        .bytes = bk.elements * sizeof(float)});
      std::shared_ptr<detail::pipeline::sink_base> sink;
      step_report rep;
      {
        std::lock_guard lock(m_);
        bk.apply_s = secs;
        bk.applied = w.step + 1;
        if (std::all_of(buckets_.begin(), buckets_.end(), [&](auto const& x) { return x.applied > w.step; })) {
          rep = report_locked(w.step);  // in the same critical section: a trainer woken by this step sees it
          sink = sink_;
        }
      }
      cv_.notify_all();
      if (sink) sink->record(rep);
    }
  }

  // The step's report, from the buckets' figures; called with m_ held (the encode thread may
  // already be writing the next step's figures).
  step_report report_locked(std::uint64_t step) {
    step_report rep{.step = step, .rank = t_.rank()};
    {
      double residual_sq = 0;
      for (auto const& bk : buckets_) {
        rep.dense_bytes += bk.elements * sizeof(float);
        rep.encoded_bytes += bk.encoded_bytes;
        rep.sent_bytes += bk.sent_bytes;
        rep.encode_seconds += bk.encode_s;
        rep.exchange_seconds += bk.exchange_s;
        rep.apply_seconds += bk.apply_s;
        residual_sq += bk.residual_sq;
      }
      if (options_.measure_residual) rep.residual_norm = std::sqrt(residual_sq);
      rep.compression_ratio =
          rep.encoded_bytes == 0 ? 0.0 : static_cast<double>(rep.dense_bytes) / static_cast<double>(rep.encoded_bytes);
      rep.wait_seconds = wait_seconds_.exchange(0.0);
      last_report_ = rep;
    }
    return rep;
  }

  // Sum of squares of bucket b's first feedback buffer (the residual), on the encode thread right
  // after the bucket's encode: one read pass, only with options.measure_residual.
  [[nodiscard]] double residual_squares(std::size_t b) const {
    double sum = 0;
    if constexpr (F::state_buffers > 0) {
      auto const sl = fstate_->slice(b);
      if (fstate_->precision() == element_type::bf16) {
        for (auto x : sl.template buffer<Eigen::bfloat16>(0)) sum += double(float(x)) * double(float(x));
      } else {
        for (float x : sl.template buffer<float>(0)) sum += double(x) * double(x);
      }
    }
    return sum;
  }

  void emit(stage_sample const& s) {
    std::shared_ptr<detail::pipeline::sink_base> sink;
    {
      std::lock_guard lock(m_);
      sink = sink_;
    }
    if (sink) sink->record(s);
  }
  [[nodiscard]] double at(clock::time_point t) const { return std::chrono::duration<double>(t - epoch_).count(); }
  static double seconds_since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

  static void put_floats(std::vector<std::byte>& out, std::span<float const> v) {
    serial::put<std::uint64_t>(out, v.size());
    serial::append(out, std::as_bytes(v));
  }
  static bool get_floats(serial::reader& r, std::span<float> v) {
    std::uint64_t n = 0;
    std::span<std::byte const> raw;
    if (!r.get(n) || n != v.size() || !r.take(v.size() * sizeof(float), raw)) return false;
    std::memcpy(v.data(), raw.data(), raw.size());
    return true;
  }
  static void put_blob(std::vector<std::byte>& out, std::vector<std::byte> const& blob) {
    serial::put<std::uint64_t>(out, blob.size());
    serial::append(out, blob);
  }
  static bool get_blob(serial::reader& r, std::span<std::byte const>& blob) {
    std::uint64_t n = 0;
    return r.get(n) && n <= r.left() && r.take(static_cast<std::size_t>(n), blob);
  }

  C codec_;
  std::array<C, 4> codec_ring_{};
  F feedback_;
  O opt_;
  T t_;
  pipeline_options options_;
  layout layout_{};
  bucket_plan plan_{};
  bool attached_ = false;
  std::vector<std::span<float>> user_;
  std::vector<std::vector<placement>> placements_;
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> tensor_buckets_;  // (bucket, chunks of it)
  std::vector<bucket_state> buckets_;
  std::unique_ptr<feedback_state> fstate_;
  std::vector<float> master_;
  std::vector<std::vector<float>> grads_;
  std::vector<float> ahead_, previous_;          // staleness compensation: published estimate, w_prev
  std::vector<optimizer_state<O>> ahead_state_;  // staleness compensation (local_step): scratch states
  std::size_t gbuf_ = 0;
  std::vector<std::uint8_t> reported_;
  std::size_t reported_count_ = 0;
  std::vector<std::size_t> pending_;
  std::uint64_t step_ = 0, published_ = 0;
  clock::time_point epoch_{};
  std::atomic<double> wait_seconds_{0.0};

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<work> encode_queue_;
  std::deque<work> apply_queue_;
  bool stop_ = false;
  std::exception_ptr failure_;
  step_report last_report_{};
  std::shared_ptr<detail::pipeline::sink_base> sink_;
  std::shared_ptr<step_hook<C, transport_type>> hook_;  // set before attach, read-only afterwards
  std::vector<std::thread> threads_;
};

template <class C, class F, class O, class T>
pipeline(C, F, O, T&&) -> pipeline<C, F, O, T, by_codec>;
template <class C, class F, class O, class T>
pipeline(C, F, O, T&&, pipeline_options) -> pipeline<C, F, O, T, by_codec>;
template <class C, class F, class O, class T, class Collective>
pipeline(C, F, O, T&&, pipeline_options, Collective) -> pipeline<C, F, O, T, Collective>;

}  // namespace sluice

template <>
struct fmt::formatter<sluice::pipeline_options> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::pipeline_options const& o, Ctx& ctx) const {
    return fmt::format_to(ctx.out(),
                          "pipeline_options{{.staleness = {}, .bucket_bytes = {}, .first_bucket_bytes = {}, "
                          ".bypass_below_elements = {}, .bypass_max_dims = {}, .seed = {}, .timeout = {}ms, "
                          ".sparse_apply = {}, .broadcast_parameters = {}, .kernel_threads = {}, .compensation = {}}}",
                          o.staleness, o.bucket_bytes, o.first_bucket_bytes, o.bypass_below_elements, o.bypass_max_dims,
                          o.seed, o.timeout.count(), o.sparse_apply, o.broadcast_parameters, o.kernel_threads,
                          o.compensation);
  }
};
