// Which policy combinations a pipeline accepts: at compile time (each refusal says what, why and
// what to write instead) and, for values, before the first step (validate()).
#pragma once

#include <cstdint>
#include <type_traits>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/feedback/concepts.hpp>
#include <sluice/feedback/momentum_correction.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/non_finite.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/exchange.hpp>
#include <sluice/pipeline/options.hpp>
#include <sluice/transport/concepts.hpp>
#include <sluice/transport/launcher.hpp>

namespace sluice::detail::pipeline {

template <class F>
inline constexpr bool is_momentum_correction = std::is_same_v<F, momentum_correction>;

/// The rules, as a base class of pipeline<C, F, O, T, Collective>: instantiating the pipeline
/// checks them.
template <class C, class F, class O, class T, class Collective>
struct rules {
  static_assert(
      Codec<C, float> || requires { typename C::codec_concept; },
      "sluice::pipeline: the first argument is not a sluice::Codec: pass a codec value such as "
      "sluice::top_k{.ratio = 0.01} (a type of your own needs `using codec_concept = sluice::codec_tag;`, "
      "max_encoded_bytes, encode and decode_into: see docs/compress.md)");
  static_assert(
      Codec<C, float> || !requires { typename C::codec_concept; },
      "sluice::pipeline: the first argument declares codec_concept but does not model sluice::Codec: "
      "give it max_encoded_bytes(n), encode(grad, ctx, ws, out) and one template decode_into(msg, ctx, ws, "
      "dense, mode) for both decode modes (not separate decode and decode_add members), and make it a regular "
      "value (default-constructible, copyable, ==): see docs/compress.md");
  static_assert(!Codec<C, float> || FeedbackFor<F, C, float>,
                "sluice::pipeline: the second argument is not error feedback for this codec: pass "
                "sluice::no_feedback{}, sluice::residual{}, sluice::momentum_correction{} or sluice::ef21{}");
  static_assert(Optimizer<O>,
                "sluice::pipeline: the third argument is not a sluice::Optimizer: pass sluice::sgd{...}, "
                "sluice::adam{...} or sluice::adamw{...}");
  static_assert(Transport<std::remove_cvref_t<T>>,
                "sluice::pipeline: the fourth argument is not a sluice::Transport: pass an engine endpoint "
                "(sluice::local_transport, sluice::zmq_transport or sluice::mpi_transport)");
  using transport_type = std::remove_cvref_t<T>;
  using collective = typename resolve_collective<C, Collective>::type;
  static constexpr bool sparse_exchange = std::is_same_v<collective, by_sparse_allgather>;
  static constexpr bool ring_exchange = std::is_same_v<collective, by_ring_allreduce>;
  static constexpr bool mpi_exchange = std::is_same_v<collective, by_mpi_allreduce>;
  static constexpr bool hierarchical_exchange = std::is_same_v<collective, by_hierarchical>;
  static constexpr bool dense_exchange = ring_exchange || mpi_exchange;
  /// Compressed buckets end in a sparse sum (with pipeline_options::sparse_apply): sparse codecs
  /// summed by the sparse allgather, or by the leaders of by_hierarchical.
  static constexpr bool sparse_result = codec_traits<C>::is_sparse && (sparse_exchange || hierarchical_exchange);
  /// The aggregation's part of the configuration's identity.
  static constexpr std::uint32_t collective_id = ring_exchange           ? 1
                                                 : mpi_exchange          ? 2
                                                 : sparse_exchange       ? 3
                                                 : hierarchical_exchange ? 5
                                                                         : 4;

  static_assert(std::is_reference_v<T> || std::is_move_constructible_v<transport_type>,
                "sluice::pipeline: this transport cannot be moved (it owns sockets or an MPI communicator), so "
                "std::move(transport) cannot hand it over; pass it as an lvalue (`transport`, not "
                "`std::move(transport)`): the pipeline then refers to it, and it must outlive the pipeline");
  static_assert(serial::Hashable<C> && serial::Hashable<F> && serial::Hashable<O>,
                "sluice::pipeline: a policy has no hash_append, which identifies its value in attach checks and "
                "checkpoints; declare `friend void hash_append(sluice::serial::hasher& h, my_policy const& p) "
                "{ h(\"my_policy\", p.field, ...); }` beside its fields");
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
      !is_momentum_correction<F> || std::is_same_v<O, sgd>,
      "sluice::pipeline: momentum_correction (DGC) accumulates momentum before selection, so the optimizer "
      "must not keep its own; use sluice::sgd{} with momentum = 0, or sluice::residual{} with this optimizer");

  /// by_hierarchical with hierarchical_sparse::gather_frames and a sparse codec (others ignore it).
  static bool gather_frames(Collective const& choice) {
    if constexpr (hierarchical_exchange && codec_traits<C>::is_sparse)
      return choice.sparse == hierarchical_sparse::gather_frames;
    else
      return ((void)choice, false);
  }

  /// Ranks per group of by_hierarchical (the value's, or the launcher's LOCAL_WORLD_SIZE); 1 otherwise.
  static int group_size(Collective const& choice) {
    if constexpr (hierarchical_exchange) {
      int const g = choice.group_size > 0 ? choice.group_size : env_int("LOCAL_WORLD_SIZE", 0, "by_hierarchical");
      require(g >= 1, errc::invalid_argument,
              "pipeline: by_hierarchical needs its group size: give by_hierarchical{{.group_size = ranks per group}}, "
              "or start the ranks with LOCAL_WORLD_SIZE set (torchrun and sluice-run set it)");
      return g;
    } else {
      (void)choice;
      return 1;
    }
  }

  /// Whether the feedback refuses NaN/Inf gradients (the pipeline's read checks them in its copy).
  static bool checks_finite(F const& feedback) noexcept {
    if constexpr (requires { feedback.non_finite; })
      return feedback.non_finite != non_finite_policy::propagate;
    else
      return false;
  }

  /// errc::invalid_argument for a codec value this pipeline cannot run (at construction and in
  /// set_codec()): its own checks, and error feedback that would diverge with it.
  static void validate_codec(C const& codec) {
    if constexpr (requires { codec.validate(); }) codec.validate();
    // Error feedback keeps x - decoded, whose expected square an unbiased quantizer bounds by
    // ω |x|²: for ω >= 1 the residual grows from step to step and training diverges (qsgd's
    // default 7 levels over 512 elements: ω = 3.2, non-finite within 60 steps).
    if constexpr (!std::is_same_v<F, no_feedback> && requires { codec.variance_bound(); }) {
      double const omega = codec.variance_bound();
      if constexpr (requires { C::feedback_bucket(codec.levels); })
        require(omega < 1, errc::invalid_argument,
                "pipeline: {} with error feedback: its variance bound {:.3g} (E|decoded - x|^2 <= bound |x|^2) is "
                "not below 1, so the residual grows every step and training diverges; use .bucket = {} "
                "(feedback_bucket({}): bound <= 0.5), more levels, or sluice::no_feedback{{}}",
                codec, omega, C::feedback_bucket(codec.levels), codec.levels);
      else
        require(omega < 1, errc::invalid_argument,
                "pipeline: {} with error feedback: its variance bound {:.3g} is not below 1, so the residual grows "
                "every step and training diverges; use sluice::no_feedback{{}} or a finer quantizer",
                codec, omega);
    }
  }

  /// errc::invalid_argument for values that cannot run, before anything starts.
  static void validate(C const& codec, F const& feedback, O const& opt, pipeline_options const& o) {
    require(o.staleness <= 2, errc::invalid_argument,
            "pipeline: staleness {} is not supported; use 0 (synchronous), 1 or 2", o.staleness);
    require(o.bucketing.cap_bytes > 0, errc::invalid_argument,
            "pipeline: bucketing.cap_bytes is 0; give the bytes per bucket, > 0 (default 25 MiB)");
    require(o.bucketing.first_cap_bytes > 0, errc::invalid_argument,
            "pipeline: bucketing.first_cap_bytes is 0; give the bytes of the first bucket, > 0 (default 1 MiB)");
    require(o.bucketing.chunk_alignment > 0, errc::invalid_argument,
            "pipeline: bucketing.chunk_alignment is 0; give a chunk length multiple, > 0 (default 1024 elements)");
    require(o.timeout.count() > 0, errc::invalid_argument, "pipeline: timeout must be > 0");
    require(o.kernel_threads >= 0, errc::invalid_argument, "pipeline: kernel_threads {} must be >= 0",
            o.kernel_threads);
    opt.validate();
    validate_codec(codec);
    if constexpr (requires { feedback.non_finite; })
      require(feedback.non_finite != non_finite_policy::skip_step, errc::invalid_argument,
              "pipeline: non_finite_policy::skip_step would skip a step on one rank while the others send theirs; "
              "use throw_error (an error naming the parameter) or propagate (NaN/Inf summed like any value)");
    if constexpr (is_momentum_correction<F>)
      require(opt.momentum == 0, errc::invalid_argument,
              "pipeline: momentum_correction keeps the momentum (DGC); set sgd.momentum = 0 (it is {})", opt.momentum);
  }
};

}  // namespace sluice::detail::pipeline
