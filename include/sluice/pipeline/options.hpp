// The values a pipeline is built from besides its policies: the aggregation choice (by_* tags),
// pipeline_options, the step hook the solver's controller binds through, the stage threads'
// names, and the one owner of the pipeline's message tags.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include <sluice/bucket/plan.hpp>
#include <sluice/collective/concepts.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/pipeline/staleness.hpp>
#include <sluice/transport/concepts.hpp>

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
/// Two tiers (StellaTrain's clusters): consecutive ranks form groups of `group_size` (the last may
/// be smaller), each summed on its leader (the group's first rank) over the fast path; the leaders
/// run the codec's exchange, with error feedback on the group's sum, over the thin link, and send
/// the result to their members. group_size 0: LOCAL_WORLD_SIZE from the launcher (torchrun's).
///
/// What crosses the thin link for a sparse codec (`codec_traits<C>::is_sparse`: top_k, random_k,
/// block_top_k, threshold); the other codecs always compress the leader's sum.
enum class hierarchical_sparse : std::uint8_t {
  sum_on_leader,  ///< members send fp32 gradients; the leader compresses the group's sum with its own error feedback:
                  ///< one frame per group crosses the link (the fewest bytes)
  gather_frames   ///< every rank compresses its own gradient with its own error feedback, as flat does; each leader
                  ///< gathers its group's frames, the leaders relay them to each other and to their members: flat's
                  ///< sum bit for bit (flat's steps), no fp32 hop, (N - g) / (N - 1) of flat's frames on the link
};
struct by_hierarchical {
  int group_size = 0;  ///< ranks per group, >= 1; 0: the environment's LOCAL_WORLD_SIZE
  hierarchical_sparse sparse = hierarchical_sparse::sum_on_leader;  ///< sparse codecs: what the leaders exchange
  friend bool operator==(by_hierarchical const&, by_hierarchical const&) = default;
};

/// How the pipeline's three stage threads share the machine with the trainer's thread (Linux;
/// elsewhere the fields are checked and otherwise ignored). By default the encode and apply
/// threads, which run the CPU kernels, sit below the trainer (nice + 10): when the trainer needs
/// its core it gets it, and the stages run in the time it leaves. The exchange thread mostly
/// waits on the network and its wake-up is on the step's path: it keeps the trainer's priority.
struct stage_scheduling {
  int nice = 10;            ///< added to the encode and apply threads' nice value, 0 .. 19 (0: the trainer's)
  int exchange_nice = 0;    ///< added to the exchange thread's nice value, 0 .. 19
  std::vector<int> cpus{};  ///< cores the three stage threads may run on (sched_setaffinity); empty: any
  friend bool operator==(stage_scheduling const&, stage_scheduling const&) = default;
};

/// Where the trainer reads its parameters.
enum class parameter_home : std::uint8_t {
  trainer,  ///< the spans given to attach(): step() copies each update there, on the trainer's thread
  pipeline  ///< two pipeline-owned buffers the apply thread fills ahead of time: read parameters() after every step()
};

/// Where the trainer writes its gradients.
enum class gradient_home : std::uint8_t {
  trainer,  ///< its own memory, lent through gradient_ready(i, grad) until step() returns: the encode thread copies it
            ///< out
  pipeline  ///< staleness + 1 pipeline-owned buffers, handed out by gradients() each step: encoded where they lie
};

/// Options of a pipeline. A regular value.
struct pipeline_options {
  unsigned staleness = 0;  ///< 0, 1 or 2: the parameters step(t) leaves to the trainer hold updates 0 .. t - s
  /// The bucket plan's options (bucket/plan.hpp): cap_bytes and first_cap_bytes (> 0), chunking,
  /// the compression bypass of small and 1-D tensors, the fill order.
  bucket_options bucketing{};
  std::uint64_t seed = 0;                     ///< job-wide seed of the random codecs and stochastic rounding
  std::chrono::milliseconds timeout{60'000};  ///< deadline of each collective call and of each wait for a peer
  bool sparse_apply = true;                   ///< sparse codecs: sum to a sparse result and step the optimizer sparsely
  bool broadcast_parameters = true;           ///< attach() copies rank 0's parameters to every rank (as DDP does)
  bool measure_residual = false;              ///< step_report::residual_norm (one read pass over the feedback state)
  int kernel_threads = 0;  ///< OpenMP threads each stage thread's kernels may use; 0: omp_get_max_threads()
  staleness_compensation compensation{};  ///< the trainer's parameters with staleness >= 1 (pipeline/staleness.hpp)
  stage_scheduling scheduling{};          ///< the stage threads' priority and cores
  parameter_home parameters = parameter_home::trainer;  ///< where the trainer reads its parameters
  gradient_home gradients = gradient_home::trainer;     ///< where the trainer writes its gradients
  friend bool operator==(pipeline_options const&, pipeline_options const&) = default;
  /// The fields that change what a pipeline computes (attach checks, checkpoints); timeout,
  /// broadcast_parameters, measure_residual, kernel_threads, scheduling, parameters and gradients
  /// may differ between ranks and runs.
  /// The hash is that of the options before bucketing was one field (the same values in the same
  /// order), so checkpoints saved then still restore; bucketing's chunk_bytes, chunk_alignment and
  /// reverse, which a pipeline could not set then, join it only when they differ from bucket_options{}.
  friend void hash_append(serial::hasher& h, pipeline_options const& o) {
    bucket_options const& b = o.bucketing;
    h("pipeline_options", o.staleness, b.cap_bytes, b.first_cap_bytes, b.bypass_below_elements, b.bypass_max_dims,
      o.seed, o.sparse_apply, o.compensation);
    bucket_options const d{};
    if (b.chunk_bytes != d.chunk_bytes || b.chunk_alignment != d.chunk_alignment || b.reverse != d.reverse)
      h("bucketing", b.chunk_bytes, b.chunk_alignment, b.reverse);
  }
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

/// The threads a pipeline's telemetry names (stage_sample::thread holds the underlying value).
enum class stage_thread : std::uint32_t { trainer = 0, encode = 1, exchange = 2, apply = 3 };

/// The message tags a pipeline uses, handed out here only. Bucket b's collective owns
/// tags_per_collective tags from bucket(b); attach() and the first exchange after attach (or a
/// restore) own four tags below tag_limit - 60; tags in [first_free, attach) are free for traffic
/// beside the pipeline on the same transport (the solver's controller).
struct pipeline_tags {
  static constexpr std::uint32_t bucket_slots = 4096;           ///< buckets beyond this reuse tags (b % bucket_slots)
  static constexpr message_tag attach{tag_limit - 64};          ///< layout and configuration to rank 0
  static constexpr message_tag attach_verdict{tag_limit - 63};  ///< rank 0's verdict and the run id
  static constexpr message_tag attach_parameters{tag_limit - 62};  ///< rank 0's parameters
  static constexpr message_tag resume{tag_limit - 61};             ///< run id and step before the first exchange
  static constexpr std::uint32_t first_free = tags_per_collective * (1 + bucket_slots);

  /// The base tag of bucket b's collective.
  static constexpr message_tag bucket(std::size_t b) noexcept {
    return message_tag{static_cast<std::uint32_t>(tags_per_collective * (1 + b % bucket_slots))};
  }
  /// Whether traffic beside the pipeline may use tags [t, t + count).
  static constexpr bool is_free(message_tag t, std::uint32_t count = 1) noexcept {
    std::uint64_t const first = to_underlying(t), last = first + count;
    bool const below_attach = last <= to_underlying(attach);
    bool const above_pipeline = first > to_underlying(resume) && last <= tag_limit;
    return first >= first_free && (below_attach || above_pipeline);
  }
};

}  // namespace sluice

template <>
struct fmt::formatter<sluice::pipeline_options> {
  constexpr auto parse(fmt::format_parse_context& ctx) -> decltype(ctx.begin()) { return ctx.begin(); }
  template <class Ctx>
  auto format(sluice::pipeline_options const& o, Ctx& ctx) const {
    auto out = fmt::format_to(ctx.out(),
                              "pipeline_options{{.staleness = {}, .bucketing = {}, .seed = {}, .timeout = {}ms, "
                              ".sparse_apply = {}, .broadcast_parameters = {}, .measure_residual = {}, "
                              ".kernel_threads = {}, .compensation = {}, .scheduling = stage_scheduling{{.nice = {}, "
                              ".exchange_nice = {}, .cpus = [",
                              o.staleness, o.bucketing, o.seed, o.timeout.count(), o.sparse_apply,
                              o.broadcast_parameters, o.measure_residual, o.kernel_threads, o.compensation,
                              o.scheduling.nice, o.scheduling.exchange_nice);
    for (std::size_t i = 0; i < o.scheduling.cpus.size(); ++i)
      out = fmt::format_to(out, "{}{}", i == 0 ? "" : ", ", o.scheduling.cpus[i]);
    return fmt::format_to(out, "]}}, .parameters = {}, .gradients = {}}}",
                          o.parameters == sluice::parameter_home::trainer ? "trainer" : "pipeline",
                          o.gradients == sluice::gradient_home::trainer ? "trainer" : "pipeline");
  }
};
