// Benchmark conventions shared by every bench/<area>: the bandwidth reference kernel measured in
// the same process, and the counters each benchmark reports (bytes_per_second, items_per_second,
// bw_frac). bw_frac = achieved bytes/s over the reference kernel's bytes/s for the same streams
// (read-only, updated in place, write-only) and the same thread count.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sluice/config.hpp>
#include <sluice/core/memory.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/simd.hpp>

namespace sluice::bench {

/// Bytes per element a kernel moves, by kind of stream: `read` only read (a gradient), `update`
/// read and written back in place (parameters, optimizer state, an error-feedback residual),
/// `write` only written (an encoded message, a decoded tensor). An update stream counts twice.
struct traffic {
  double read = 0;
  double update = 0;
  double write = 0;
  /// Bytes per element of each update stream, when they are not the default split of `update`
  /// into 4-byte streams (bf16 Adam: p {4} and the bf16 moments m, v {2, 2}), so that the reference
  /// has as many arrays as the kernel. They must add up to `update`.
  std::vector<double> update_streams{};
  [[nodiscard]] double bytes() const noexcept { return read + 2 * update + write; }
};

/// Elements the reference kernel streams over: every stream leaves the caches (>= 32 MiB each for
/// 4-byte streams).
inline constexpr std::size_t reference_elements = std::size_t{1} << 25;

/// One array of a kernel under test: its first byte and its bytes per element.
struct array_ref {
  void* data = nullptr;
  double bytes_per_element = 4;
};

/// The arrays a kernel over `elements` elements reads (only), updates in place and writes (only):
/// given to run_interleaved, the reference streams over these very arrays instead of its own.
struct kernel_arrays {
  std::size_t elements = 0;
  std::vector<array_ref> read{}, update{}, write{};
};

namespace detail {

/// Elements every stream of the reference kernel advances by at a time.
inline constexpr std::size_t step_elements = 512;
/// Chunks a step is cut into by the line-at-a-time bodies (64 elements each).
inline constexpr std::size_t line_chunks = 8;
/// Reference bodies: 0 baseline words; 1, 2 AVX2 / AVX-512 vectors a step at a time; 3, 4 AVX2 /
/// AVX-512 vectors a line at a time.
inline constexpr int reference_bodies = 5;
/// Streams of each kind (read, update, write) the reference takes at most.
inline constexpr std::size_t max_streams = 64;

/// One array of the reference kernel: `words` 64-bit words advanced per step of step_elements,
/// from `base`: the reference's own array (`owned`) or one of the kernel's (not owned).
struct reference_stream {
  std::vector<std::uint64_t, sluice::line_allocator<std::uint64_t>> owned;
  std::uint64_t* base = nullptr;
  std::size_t words = 0;
};

/// The widths of the arrays a kernel over floats moving `bytes` per element has: one 4-byte stream
/// per whole 4 bytes, plus one narrower stream for the rest (0.5 bytes = packed 4-bit codes).
inline std::vector<double> split_streams(double bytes) {
  std::vector<double> widths;
  if (bytes <= 0) return widths;
  auto const whole = static_cast<std::size_t>(bytes / 4);
  widths.assign(whole, 4.0);
  if (double const rest = bytes - 4.0 * static_cast<double>(whole); rest > 1e-9) widths.push_back(rest);
  return widths;
}

/// One array per stream width (bytes per element). A stream narrower than 1/8 byte per element is
/// rounded up to one word per step.
inline std::vector<reference_stream> make_streams(std::vector<double> const& widths, std::size_t steps) {
  std::vector<reference_stream> v;
  for (double b : widths)
    v.push_back({{}, nullptr, std::max<std::size_t>(static_cast<std::size_t>(b * step_elements / 8 + 0.5), 1)});
  for (auto& s : v) {
    s.owned.resize(s.words * steps);
    s.base = s.owned.data();
    auto& w = s.owned;
    sluice::parallel_chunks(w.size(), 1 << 16, [&](std::size_t lo, std::size_t hi, int) {
      for (std::size_t i = lo; i < hi; ++i) w[i] = i * 0x9E3779B97F4A7C15ull;
    });
  }
  return v;
}

/// Streams of one measure_reference run.
struct reference_streams {
  std::vector<reference_stream> read, update, write;
};

/// A zero the compiler cannot see through: update streams add it (so a pass over the kernel's own
/// arrays leaves their values unchanged, yet every line is read and written back) and write
/// streams store it.
inline std::uint64_t opaque_zero() noexcept {
  std::uint64_t z = 0;
  __asm__ volatile("" : "+r"(z));
  return z;
}

/// Steps [sb, se) of the reference in 64-bit scalar words, as compiled for the baseline (the
/// compiler vectorizes it with the baseline's vectors, SSE2 on x86-64).
inline std::uint64_t reference_words(reference_streams& r, std::size_t sb, std::size_t se) noexcept {
  std::uint64_t acc = sb;
  std::uint64_t const zero = opaque_zero();
  for (std::size_t st = sb; st < se; ++st) {
    for (auto& s : r.read) {
      std::uint64_t const* SLUICE_RESTRICT w = s.base + st * s.words;
      std::uint64_t a[4] = {0, 0, 0, 0};  // independent sums: the adds never limit the loads
      std::size_t i = 0;
      for (; i + 4 <= s.words; i += 4) a[0] += w[i], a[1] += w[i + 1], a[2] += w[i + 2], a[3] += w[i + 3];
      for (; i < s.words; ++i) a[0] += w[i];
      acc += a[0] + a[1] + a[2] + a[3];
    }
    // Stores never wait for this step's loads (as in a real element-wise kernel, where each store
    // depends only on its own element).
    for (auto& s : r.update) {
      std::uint64_t* SLUICE_RESTRICT w = s.base + st * s.words;
      for (std::size_t i = 0; i < s.words; ++i) w[i] += zero;
    }
    for (auto& s : r.write) {
      std::uint64_t* SLUICE_RESTRICT w = s.base + st * s.words;
      for (std::size_t i = 0; i < s.words; ++i) w[i] = zero;
    }
  }
  return acc;
}

#if SLUICE_HAVE_AVX2_TARGET
// The vector bodies, with 256-bit and 512-bit loads and stores. On AMD Zen 5 (2 threads, 2 cores)
// the baseline's 16-byte accesses stopped short of the memory limit: update streams (4 B read +
// 12 B updated per element) streamed at 85-113 GB/s in SSE2 words against 110-140 GB/s with 32- or
// 64-byte vectors, which kernels with AVX2 bodies reached.
//
// Each step of 512 elements is cut into `chunks` chunks, and every stream advances one chunk before
// the next chunk starts. With 1 chunk each stream moves a whole step (2 KiB of a 4-byte stream) at
// a time; with line_chunks = 8, 64 elements (4 lines of a 4-byte stream), close to the order in
// which an element-wise kernel touches its streams. Measured on this host (a standalone loop over
// Adam's seven streams, 2^26 elements, 2 threads, in minutes when the bandwidth sagged): a line
// per stream at a time kept 60-94 GB/s where 2 KiB per stream at a time fell to 42-67 GB/s. Here,
// generic over the streams, 64-byte chunks ran at a third of that (the loop over streams per line
// costs more than the line), 256-byte chunks at or near the kernels' rate. Words of a stream that
// do not divide into the chunks (streams under 1 byte per element) move at the end of the step.
#define SLUICE_BENCH_REFERENCE_BODY(LOAD8, ADD8, STORE8, LOAD4, ADD4, STORE4, Z8, Z4, SINK8, SINK4) \
  constexpr std::size_t most = max_streams;                                                         \
  std::uint64_t acc = sb;                                                                           \
  std::uint64_t const z = opaque_zero();                                                            \
  /* The streams' bases and chunk words in locals, which the stores below cannot alias. */          \
  std::uint64_t* base[3][most];                                                                     \
  std::size_t words[3][most], cw[3][most], count[3] = {0, 0, 0};                                    \
  {                                                                                                 \
    int role = 0;                                                                                   \
    for (auto* v : {&r.read, &r.update, &r.write}) {                                                \
      for (auto const& s : *v)                                                                      \
        if (count[role] < most) {                                                                   \
          base[role][count[role]] = s.base, words[role][count[role]] = s.words;                     \
          cw[role][count[role]++] = s.words / chunks;                                               \
        }                                                                                           \
      ++role;                                                                                       \
    }                                                                                               \
  }                                                                                                 \
  for (std::size_t st = sb; st < se; ++st) {                                                        \
    for (std::size_t c = 0; c < chunks; ++c) {                                                      \
      for (std::size_t k = 0; k < count[0]; ++k) {                                                  \
        std::uint64_t const* w = base[0][k] + st * words[0][k] + c * cw[0][k];                      \
        std::size_t i = 0;                                                                          \
        for (; i + 8 <= cw[0][k]; i += 8) SINK8(LOAD8(w + i));                                      \
        if (i + 4 <= cw[0][k]) SINK4(LOAD4(w + i)), i += 4;                                         \
        for (; i < cw[0][k]; ++i) acc += w[i];                                                      \
      }                                                                                             \
      for (std::size_t k = 0; k < count[1]; ++k) {                                                  \
        std::uint64_t* w = base[1][k] + st * words[1][k] + c * cw[1][k];                            \
        std::size_t i = 0;                                                                          \
        for (; i + 8 <= cw[1][k]; i += 8) STORE8(w + i, ADD8(LOAD8(w + i), Z8));                    \
        if (i + 4 <= cw[1][k]) STORE4(w + i, ADD4(LOAD4(w + i), Z4)), i += 4;                       \
        for (; i < cw[1][k]; ++i) w[i] += z;                                                        \
      }                                                                                             \
      for (std::size_t k = 0; k < count[2]; ++k) {                                                  \
        std::uint64_t* w = base[2][k] + st * words[2][k] + c * cw[2][k];                            \
        std::size_t i = 0;                                                                          \
        for (; i + 8 <= cw[2][k]; i += 8) STORE8(w + i, Z8);                                        \
        if (i + 4 <= cw[2][k]) STORE4(w + i, Z4), i += 4;                                           \
        for (; i < cw[2][k]; ++i) w[i] = z;                                                         \
      }                                                                                             \
    }                                                                                               \
    for (int role = 0; role < 3; ++role)                                                            \
      for (std::size_t k = 0; k < count[role]; ++k)                                                 \
        for (std::size_t i = cw[role][k] * chunks; i < words[role][k]; ++i) {                       \
          std::uint64_t& x = base[role][k][st * words[role][k] + i];                                \
          if (role == 0)                                                                            \
            acc += x;                                                                               \
          else                                                                                      \
            x = role == 1 ? x + z : z;                                                              \
        }                                                                                           \
  }

// Eight words: two 256-bit halves (AVX2) or one 512-bit vector (AVX-512); four words: one 256-bit.
struct ymm_pair {
  __m256i lo, hi;
};
SLUICE_TARGET_AVX2 inline ymm_pair load8_avx2(std::uint64_t const* w) noexcept {
  return {_mm256_loadu_si256(reinterpret_cast<__m256i const*>(w)),
          _mm256_loadu_si256(reinterpret_cast<__m256i const*>(w + 4))};
}
SLUICE_TARGET_AVX2 inline ymm_pair add8_avx2(ymm_pair a, ymm_pair b) noexcept {
  return {_mm256_add_epi64(a.lo, b.lo), _mm256_add_epi64(a.hi, b.hi)};
}
SLUICE_TARGET_AVX2 inline void store8_avx2(std::uint64_t* w, ymm_pair v) noexcept {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w), v.lo);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + 4), v.hi);
}
SLUICE_TARGET_AVX2 inline __m256i load4(std::uint64_t const* w) noexcept {
  return _mm256_loadu_si256(reinterpret_cast<__m256i const*>(w));
}
SLUICE_TARGET_AVX2 inline void store4(std::uint64_t* w, __m256i v) noexcept {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w), v);
}

template <std::size_t chunks>
SLUICE_TARGET_AVX2 inline std::uint64_t reference_avx2(reference_streams& r, std::size_t sb, std::size_t se) noexcept {
  auto const z4 = _mm256_set1_epi64x(static_cast<long long>(opaque_zero()));
  ymm_pair const z8{z4, z4};
  auto sink8 = [](ymm_pair v) SLUICE_TARGET_AVX2 { __asm__ volatile("" : : "v"(v.lo), "v"(v.hi)); };
  auto sink4 = [](__m256i v) SLUICE_TARGET_AVX2 { __asm__ volatile("" : : "v"(v)); };
  SLUICE_BENCH_REFERENCE_BODY(load8_avx2, add8_avx2, store8_avx2, load4, _mm256_add_epi64, store4, z8, z4, sink8, sink4)
  return acc;
}

SLUICE_TARGET_AVX512 inline __m512i load8_avx512(std::uint64_t const* w) noexcept { return _mm512_loadu_si512(w); }
SLUICE_TARGET_AVX512 inline void store8_avx512(std::uint64_t* w, __m512i v) noexcept { _mm512_storeu_si512(w, v); }

template <std::size_t chunks>
SLUICE_TARGET_AVX512 inline std::uint64_t reference_avx512(reference_streams& r, std::size_t sb,
                                                           std::size_t se) noexcept {
  auto const z4 = _mm256_set1_epi64x(static_cast<long long>(opaque_zero()));
  auto const z8 = _mm512_set1_epi64(static_cast<long long>(opaque_zero()));
  auto sink8 = [](__m512i v) SLUICE_TARGET_AVX512 { __asm__ volatile("" : : "v"(v)); };
  auto sink4 = [](__m256i v) SLUICE_TARGET_AVX512 { __asm__ volatile("" : : "v"(v)); };
  SLUICE_BENCH_REFERENCE_BODY(load8_avx512, _mm512_add_epi64, store8_avx512, load4, _mm256_add_epi64, store4, z8, z4,
                              sink8, sink4)
  return acc;
}
#undef SLUICE_BENCH_REFERENCE_BODY
#endif

/// The reference kernel: its arrays, and one timed pass over them with a chosen body (0 = baseline
/// words; 1 = AVX2, 2 = AVX-512 vectors advancing each stream a step at a time; 3, 4 the same a
/// line at a time). The arrays are either its own for traffic `t` (allocated and touched
/// once; line_allocator: huge pages) or the kernel's own arrays (kernel_arrays): then the
/// reference reads and writes exactly the memory the kernel does, and update streams keep their
/// values (they add an opaque zero).
class reference_kernel {
 public:
  explicit reference_kernel(traffic const& t) {
    double update_sum = 0;
    for (double b : t.update_streams) update_sum += b;
    if (!t.update_streams.empty() && std::abs(update_sum - t.update) > 1e-9)
      throw std::invalid_argument("bench::traffic: update_streams do not add up to update");
    r_ = {make_streams(split_streams(t.read), steps_),
          make_streams(t.update_streams.empty() ? split_streams(t.update) : t.update_streams, steps_),
          make_streams(split_streams(t.write), steps_)};
    count_moved();
  }

  /// A reference over the kernel's own arrays; their widths must add up to `t`'s bytes per element.
  reference_kernel(kernel_arrays const& a, traffic const& t) : steps_(a.elements / step_elements) {
    if (steps_ == 0) throw std::invalid_argument("bench::kernel_arrays: fewer elements than one reference step");
    auto wrap = [](std::vector<array_ref> const& v, double want, char const* what) {
      std::vector<reference_stream> out;
      double sum = 0;
      for (auto const& x : v) {
        sum += x.bytes_per_element;
        double const words = x.bytes_per_element * step_elements / 8;
        if (x.data == nullptr || words < 1 || std::abs(words - std::round(words)) > 1e-9 ||
            reinterpret_cast<std::uintptr_t>(x.data) % 8 != 0)
          throw std::invalid_argument(std::string("bench::kernel_arrays: bad ") + what + " array");
        out.push_back({{}, static_cast<std::uint64_t*>(x.data), static_cast<std::size_t>(std::lround(words))});
      }
      if (std::abs(sum - want) > 1e-9)
        throw std::invalid_argument(std::string("bench::kernel_arrays: ") + what + " widths do not add up to traffic");
      return out;
    };
    r_ = {wrap(a.read, t.read, "read"), wrap(a.update, t.update, "update"), wrap(a.write, t.write, "write")};
    count_moved();
  }

  /// Whether this CPU (and SLUICE_SIMD) allows `body`.
  static bool has_body(int body) noexcept {
    return body == 0 || ((body == 1 || body == 3) && sluice::use_avx2()) ||
           ((body == 2 || body == 4) && sluice::use_avx512());
  }

  /// Bytes/s of one pass of `body` on all threads, counting the bytes actually moved.
  double pass(int body) {
    auto const t0 = std::chrono::steady_clock::now();
    sluice::parallel_chunks(steps_, 1024, [&](std::size_t sb, std::size_t se, int) {
      std::uint64_t acc = 0;
#if SLUICE_HAVE_AVX2_TARGET
      if (body == 4)
        acc = reference_avx512<line_chunks>(r_, sb, se);
      else if (body == 3)
        acc = reference_avx2<line_chunks>(r_, sb, se);
      else if (body == 2)
        acc = reference_avx512<1>(r_, sb, se);
      else if (body == 1)
        acc = reference_avx2<1>(r_, sb, se);
      else
#endif
        acc = reference_words(r_, sb, se);
      benchmark::DoNotOptimize(acc);
    });
    for (auto& s : r_.update) benchmark::DoNotOptimize(s.base);
    for (auto& s : r_.write) benchmark::DoNotOptimize(s.base);
    benchmark::ClobberMemory();
    return moved_ / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  void count_moved() {
    if (r_.read.size() > max_streams || r_.update.size() > max_streams || r_.write.size() > max_streams)
      throw std::invalid_argument("bench::reference_kernel: more than 64 streams of one kind");
    for (auto const& s : r_.read) moved_ += 8.0 * static_cast<double>(s.words);
    for (auto const& s : r_.update) moved_ += 16.0 * static_cast<double>(s.words);
    for (auto const& s : r_.write) moved_ += 8.0 * static_cast<double>(s.words);
    moved_ *= static_cast<double>(steps_);
  }

  std::size_t steps_ = reference_elements / step_elements;
  reference_streams r_;
  double moved_ = 0;  // bytes per pass
};

/// The median of `v` (mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  auto const mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

/// The q-quantile of `v` (nearest rank), q in [0, 1]; 0 for none.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  auto const k = static_cast<std::size_t>(std::lround(q * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

/// One reference sample of run_interleaved: the best bytes/s of one pass of each vector body the
/// CPU has (AVX2 and AVX-512, each advancing streams a step and a line at a time), or
/// of the baseline words where it has none. On Zen 5 the baseline's 16-byte words stop short of
/// the memory limit (measure_reference), and which body streams fastest changes from minute to
/// minute: with one body chosen by three rounds before the loop (tried first), 6 of 45 repetitions
/// of the optim benchmarks gave bw_frac 1.2-1.6. The best of the step bodies (1, 2) and of the line
/// bodies (3, 4) are also written to `steps` and `lines` where given.
inline double reference_sample(reference_kernel& ref, double* steps = nullptr, double* lines = nullptr) {
  double best[2] = {0, 0};
  for (int body = 1; body < reference_bodies; ++body)
    if (reference_kernel::has_body(body)) {
      double& b = best[body <= 2 ? 0 : 1];
      b = std::max(b, ref.pass(body));
    }
  if (steps != nullptr) *steps = best[0];
  if (lines != nullptr) *lines = best[1];
  double const top = std::max(best[0], best[1]);
  return top > 0 ? top : ref.pass(0);
}

struct no_companion {
  void operator()() const noexcept {}
};

}  // namespace detail

/// The streaming limit for kernels with traffic `t` on this machine: one array per stream (so the
/// prefetchers see as many concurrent streams as the kernel has), all advanced together one step
/// of 512 elements at a time on all threads, as a fused kernel advances them; read streams are
/// summed, update streams incremented in place, write streams stored. Each repetition runs every
/// body the CPU has (baseline words; AVX2 and AVX-512 vectors, whichever simd_level() allows) and
/// the best bytes/s of `reps` repetitions is returned, counting the bytes actually moved.
inline double measure_reference(traffic const& t, int reps = 5) {
  detail::reference_kernel ref(t);
  double best = 0;
  for (int rep = 0; rep < reps; ++rep)
    for (int body = 0; body < detail::reference_bodies; ++body)
      if (detail::reference_kernel::has_body(body)) best = std::max(best, ref.pass(body));
  return best;
}

/// Sets the standard counters for a kernel over `elements` elements per iteration with traffic `t`
/// per element. Call after the timing loop. The reference is measured afresh at every call, right
/// after the benchmark it normalises, so that both see the same machine load (on a shared machine a
/// reference measured once per process drifts by 2x against later benchmarks).
///
/// Caveat: bw_frac here divides the kernel's MEAN rate over the timing loop by the reference's
/// BEST of 5 repetitions x every body, measured seconds later. Both the statistic (best against
/// mean) and the moment differ, which biases bw_frac low and lets it drift with the machine's
/// bandwidth; run_interleaved measures both side by side with the same statistic.
inline void report(benchmark::State& state, std::size_t elements, traffic const& t) {
  double const per_iter = t.bytes() * static_cast<double>(elements);
  auto const iters = static_cast<double>(state.iterations());
  state.SetItemsProcessed(static_cast<std::int64_t>(iters * static_cast<double>(elements)));
  state.SetBytesProcessed(static_cast<std::int64_t>(iters * per_iter));
  double const ref = measure_reference(t);
  state.counters["ref_bytes_per_second"] = benchmark::Counter(ref);
  // bw_frac = (per_iter * iterations / time) / ref, expressed as a rate counter over per_iter/ref.
  state.counters["bw_frac"] = benchmark::Counter(iters * per_iter / ref, benchmark::Counter::kIsRate);
  state.counters["threads"] = benchmark::Counter(static_cast<double>(sluice::max_threads()));
}

/// Times `step` (one kernel call over `elements` elements with traffic `t` per element) against
/// the bandwidth reference side by side, for a benchmark registered with UseManualTime():
///
///   kernel iteration, reference sample, [companion], kernel iteration, reference sample, ...
///
/// Each benchmark iteration times one call of `step` (the iteration time given to Google
/// Benchmark), then takes one reference sample (measure_reference's arrays; one pass of each
/// vector body, the best kept: detail::reference_sample), and then calls `companion` outside
/// both timings (a benchmark may time a second kernel there: bench_optim's sparse steps).
/// Counters, all from the same pairs:
///   bw_frac               median kernel bytes/s / median reference bytes/s
///   bw_frac_p10, _p90     10th / 90th percentile of the per-pair ratio (kernel i over sample i)
///   bytes_per_second      t.bytes() * elements / median kernel time (not the mean)
///   ref_bytes_per_second  median over the reference samples
///   ref_steps_bps, ref_lines_bps  medians of the best step-at-a-time and line-at-a-time bodies
/// Unlike report() (mean kernel rate over the best of 15 reference passes measured afterwards),
/// both sides use the same statistic and sample the machine's bandwidth in the same seconds,
/// which on a host whose bandwidth drifts by a third within a minute is the only fair ratio.
/// Kernels whose data fit in cache should use report(): the reference pass would evict them.
/// Returns the medians of both sides.
struct interleaved_medians {
  double kernel_seconds = 0;              ///< median seconds of one kernel call
  double reference_bytes_per_second = 0;  ///< median over the reference samples
};

namespace detail {
template <class Step, class Companion>
interleaved_medians run_interleaved(benchmark::State& state, reference_kernel& ref, std::size_t elements,
                                    traffic const& t, Step& step, Companion& companion) {
  reference_sample(ref);  // first touch of the reference's code paths, untimed
  std::vector<double> kernel_s, ref_bps, steps_bps, lines_bps;
  for (auto _ : state) {
    auto const t0 = std::chrono::steady_clock::now();
    step();
    benchmark::ClobberMemory();
    double const secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(secs);
    kernel_s.push_back(secs);
    double steps = 0, lines = 0;
    ref_bps.push_back(reference_sample(ref, &steps, &lines));
    steps_bps.push_back(steps);
    lines_bps.push_back(lines);
    companion();
  }
  double const per_iter = t.bytes() * static_cast<double>(elements);
  std::vector<double> pair(kernel_s.size());
  for (std::size_t i = 0; i < pair.size(); ++i) pair[i] = per_iter / kernel_s[i] / ref_bps[i];
  double const kernel_med = median(kernel_s), ref_med = median(ref_bps);
  state.counters["bytes_per_second"] = benchmark::Counter(per_iter / kernel_med);
  state.counters["items_per_second"] = benchmark::Counter(static_cast<double>(elements) / kernel_med);
  state.counters["ref_bytes_per_second"] = benchmark::Counter(ref_med);
  state.counters["ref_steps_bps"] = benchmark::Counter(median(steps_bps));
  state.counters["ref_lines_bps"] = benchmark::Counter(median(lines_bps));
  state.counters["bw_frac"] = benchmark::Counter(per_iter / kernel_med / ref_med);
  state.counters["bw_frac_p10"] = benchmark::Counter(quantile(pair, 0.1));
  state.counters["bw_frac_p90"] = benchmark::Counter(quantile(pair, 0.9));
  state.counters["threads"] = benchmark::Counter(static_cast<double>(sluice::max_threads()));
  return {kernel_med, ref_med};
}

}  // namespace detail

template <class Step, class Companion = detail::no_companion>
interleaved_medians run_interleaved(benchmark::State& state, std::size_t elements, traffic const& t, Step&& step,
                                    Companion&& companion = {}) {
  detail::reference_kernel ref(t);
  return detail::run_interleaved(state, ref, elements, t, step, companion);
}

/// run_interleaved with the reference streaming over the kernel's own arrays `a` (the same
/// memory, so the same pages and placement), whose widths must add up to `t`.
template <class Step, class Companion = detail::no_companion>
interleaved_medians run_interleaved(benchmark::State& state, kernel_arrays const& a, traffic const& t, Step&& step,
                                    Companion&& companion = {}) {
  detail::reference_kernel ref(a, t);
  return detail::run_interleaved(state, ref, a.elements, t, step, companion);
}

}  // namespace sluice::bench
