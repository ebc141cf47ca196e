// The configuration solver: given the workers' compute fits, the link levels, the model layout and
// the codec candidates, it picks the codec (compression strength), per-worker integer batch sizes,
// the bucket byte cap and the staleness that minimise predicted time-to-accuracy. Exact over the
// discrete candidate set; fields the user fixed are respected.
//
// Integration (the pipeline calls this between steps, or through solver/controller.hpp):
//   sluice::solver s(problem);                         // validates; precomputes bucket tables
//   sluice::plan p = s.solve(request, bandwidths);     // bandwidths: one per link level, bytes/s
//   p.codec (a codec_value), p.batches, p.bucket_cap_bytes, p.staleness are policy values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include <sluice/bucket/layout.hpp>
#include <sluice/bucket/plan.hpp>
#include <sluice/core/error.hpp>
#include <sluice/solver/concepts.hpp>
#include <sluice/solver/cost_model.hpp>
#include <sluice/solver/efficiency.hpp>

namespace sluice {

/// One data-parallel worker (a GPU and its host share).
struct worker_desc {
  compute_fit compute{};                                            ///< f(b), fitted from measured steps
  std::size_t max_batch = std::numeric_limits<std::size_t>::max();  ///< memory cap, samples, >= 1
  friend bool operator==(worker_desc const&, worker_desc const&) = default;
};

/// A codec the solver may choose, with its measured CPU cost.
struct codec_candidate {
  codec_value codec{};                 ///< the policy value
  double encode_seconds_per_byte = 0;  ///< error feedback + encode, seconds per dense gradient byte, >= 0
  friend bool operator==(codec_candidate const&, codec_candidate const&) = default;
};

/// Everything the solver knows about the job. Every list is a candidate set the solver searches.
struct problem {
  std::vector<worker_desc> workers{};  ///< one per rank, >= 1
  std::vector<link_level> links{};     ///< innermost first; product of groups == workers.size()
  /// flat: every rank runs the codec's collective at every level. hierarchical (the pipeline's
  /// by_hierarchical{.group_size = links[0].group}): links[0] is the intra-group path, where each
  /// leader sums its group in fp32; the chosen codec is the leaders' over links[1...] (>= 2 levels).
  exchange_kind exchange = exchange_kind::flat;
  layout model{};                             ///< the gradient tensors, in order
  std::vector<codec_candidate> codecs{};      ///< >= 1
  std::vector<std::size_t> global_batches{};  ///< candidate global batch sizes (samples), >= 1
  std::vector<std::size_t> bucket_caps{std::size_t{4} << 20, std::size_t{25} << 20};  ///< bytes
  std::vector<int> staleness{0, 1, 2};  ///< candidate staleness values, each in [0, 2]
  double apply_seconds_per_byte = 0;    ///< optimizer, seconds per dense gradient byte, >= 0
  /// Sparse codecs feed sparse optimizer steps (optim's lazy / catch_up), which touch only the
  /// received indices: at most N * k of n elements, so apply costs min(1, N * density) of dense.
  bool sparse_apply = true;
  bucket_options bucketing{.chunk_bytes = std::size_t{256} << 10};  ///< all but cap_bytes
  efficiency_model efficiency{};
};

/// What the user wants: each field fixed or left to the solver (the default).
struct config_request {
  choice<codec_value> codec{};
  choice<std::size_t> global_batch{};          ///< samples over all workers
  choice<std::vector<std::size_t>> batches{};  ///< per worker; fixing it fixes global_batch too
  choice<std::size_t> bucket_cap_bytes{};
  choice<int> staleness{};
};

/// Predicted costs of one configuration at one set of bandwidths.
struct prediction {
  stage_seconds stages{};
  double step_seconds = 0;      ///< per step_seconds(stages, staleness)
  double steps_to_target = 0;   ///< efficiency_model::steps
  double time_to_accuracy = 0;  ///< steps_to_target * step_seconds
  double bytes_per_step = 0;    ///< bytes one rank sends per step, all levels
};

/// A complete configuration: the solver's answer, every field a policy value.
struct plan {
  codec_value codec{};
  std::size_t global_batch = 0;
  std::vector<std::size_t> batches{};  ///< per worker, sum == global_batch
  std::size_t bucket_cap_bytes = 0;
  int staleness = 0;
  prediction predicted{};

  /// The same configuration (predictions ignored).
  [[nodiscard]] bool same_config(plan const& o) const {
    return codec == o.codec && batches == o.batches && bucket_cap_bytes == o.bucket_cap_bytes &&
           staleness == o.staleness;
  }
};

/// Per-worker batches for a global batch minimising the slowest worker's time (equal finish
/// times): b_i >= 1, b_i <= max_batch, sum b_i = global. Exact: the continuous water level gives a
/// start no slower than the optimum, then each remaining sample goes to the worker that would
/// finish it first. Result: for workers strictly inside their bounds, finish times differ by at
/// most max_i per_sample_seconds. Empty when infeasible (global < workers or above the caps).
inline std::vector<std::size_t> allocate_batches(std::span<worker_desc const> w, std::size_t global) {
  std::size_t const n = w.size();
  if (n == 0 || global < n) return {};
  std::size_t room = 0;
  for (auto const& x : w) room = x.max_batch > global - room ? global : room + x.max_batch;
  if (room < global) return {};
  auto const fill = [&](double level) {  // continuous samples at a water level
    double s = 0;
    for (auto const& x : w) {
      double const b = (level - x.compute.fixed_seconds) / x.compute.per_sample_seconds;
      s += std::clamp(b, 1.0, static_cast<double>(x.max_batch));
    }
    return s;
  };
  double lo = 0, hi = 0;
  for (auto const& x : w) hi = std::max(hi, x.compute.seconds(std::min(global, x.max_batch)));
  for (int it = 0; it < 100 && hi - lo > 1e-15 * hi; ++it) {
    double const mid = (lo + hi) / 2;
    (fill(mid) < static_cast<double>(global) ? lo : hi) = mid;
  }
  std::vector<std::size_t> b(n);
  std::size_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double const v = std::floor((lo - w[i].compute.fixed_seconds) / w[i].compute.per_sample_seconds);
    b[i] = std::clamp<std::size_t>(v < 1 ? 1 : static_cast<std::size_t>(v), 1, w[i].max_batch);
    sum += b[i];
  }
  while (sum > global) {  // only from rounding at the bisection's end: take from the slowest
    std::size_t k = n;
    for (std::size_t i = 0; i < n; ++i)
      if (b[i] > 1 && (k == n || w[i].compute.seconds(b[i]) > w[k].compute.seconds(b[k]))) k = i;
    --b[k];
    --sum;
  }
  while (sum < global) {
    std::size_t k = n;
    for (std::size_t i = 0; i < n; ++i)
      if (b[i] < w[i].max_batch && (k == n || w[i].compute.seconds(b[i] + 1) < w[k].compute.seconds(b[k] + 1))) k = i;
    ++b[k];
    ++sum;
  }
  return b;
}

/// The slowest worker's compute seconds for these batches.
inline double compute_seconds(std::span<worker_desc const> w, std::span<std::size_t const> b) noexcept {
  double t = 0;
  for (std::size_t i = 0; i < w.size() && i < b.size(); ++i) t = std::max(t, w[i].compute.seconds(b[i]));
  return t;
}

/// Precomputed bucket tables over a problem; solve() is then arithmetic only (microseconds).
class solver {
 public:
  /// Validates the problem and precomputes the bucket tables. errc::invalid_argument naming the
  /// field for an empty list, a zero bandwidth or group, a negative time, a layout without
  /// elements, or link groups whose product is not the number of workers.
  explicit solver(problem p) : p_(std::move(p)) {
    validate_problem();
    for (std::size_t cap : p_.bucket_caps)
      for (auto const& c : p_.codecs) tables_.push_back(make_table(cap, c));
    for (std::size_t g : p_.global_batches) allocations_.push_back(allocate_batches(p_.workers, g));
  }

  [[nodiscard]] problem const& description() const noexcept { return p_; }

  /// The link levels' configured bandwidths (bytes/s), the default of solve().
  [[nodiscard]] std::vector<double> configured_bandwidths() const {
    std::vector<double> bw;
    for (auto const& l : p_.links) bw.push_back(l.bytes_per_second);
    return bw;
  }

  /// The best configuration for the request at these per-level bandwidths (bytes/s; empty: the
  /// configured ones). errc::invalid_argument for an invalid fixed field or bandwidth;
  /// errc::unsupported when no candidate is feasible (batch caps, efficiency curve).
  [[nodiscard]] plan solve(config_request const& req, std::span<double const> bandwidths = {}) const {
    auto r = ranked(req, bandwidths, 1);
    return std::move(r.front());
  }

  /// The `count` best configurations, best first (ties keep enumeration order: caps, codecs,
  /// global batches, staleness, as listed in the problem).
  [[nodiscard]] std::vector<plan> ranked(config_request const& req, std::span<double const> bandwidths,
                                         std::size_t count) const {
    std::vector<double> const bw = check_bandwidths(bandwidths);
    // Bucket tables: the candidates', or one built for a fixed field.
    std::vector<table> own;
    std::vector<table const*> tabs;
    auto const* fc = req.codec.fixed();
    auto const* fcap = req.bucket_cap_bytes.fixed();
    if (fcap) require(*fcap > 0, errc::invalid_argument, "solver: fixed bucket_cap_bytes must be > 0");
    if (fc) validate(*fc);
    bool const own_tables = (fc && !has_codec(*fc)) || (fcap && !has_cap(*fcap));
    if (own_tables) {
      std::vector<std::size_t> caps = fcap ? std::vector<std::size_t>{*fcap} : p_.bucket_caps;
      std::vector<codec_candidate> cs;
      if (fc)
        cs.push_back(candidate_for(*fc));
      else
        cs = p_.codecs;
      for (std::size_t cap : caps)
        for (auto const& c : cs) own.push_back(make_table(cap, c));
      for (auto const& t : own) tabs.push_back(&t);
    } else {
      for (auto const& t : tables_)
        if ((!fc || t.codec.codec == *fc) && (!fcap || t.cap == *fcap)) tabs.push_back(&t);
    }
    // Batches: fixed per worker, fixed global, or every candidate.
    struct batch_set {
      std::size_t global;
      std::vector<std::size_t> const* split;
      double compute;
    };
    std::vector<std::size_t> own_split;
    std::vector<batch_set> batch_sets;
    if (auto const* fb = req.batches.fixed()) {
      check_fixed_batches(*fb, req.global_batch.fixed());
      std::size_t g = 0;
      for (std::size_t x : *fb) g += x;
      batch_sets.push_back({g, fb, 0});
    } else if (auto const* fg = req.global_batch.fixed()) {
      require(*fg > 0, errc::invalid_argument, "solver: fixed global_batch must be > 0");
      own_split = allocate_batches(p_.workers, *fg);
      require(!own_split.empty(), errc::unsupported,
              "solver: global batch {} cannot be split over {} workers (each needs >= 1 sample, and the memory "
              "caps allow at most {}); fix a feasible global batch",
              *fg, p_.workers.size(), total_room());
      batch_sets.push_back({*fg, &own_split, 0});
    } else {
      for (std::size_t i = 0; i < p_.global_batches.size(); ++i)
        if (!allocations_[i].empty()) batch_sets.push_back({p_.global_batches[i], &allocations_[i], 0});
    }
    for (auto& b : batch_sets) b.compute = compute_seconds(p_.workers, *b.split);
    std::vector<int> stal = p_.staleness;
    if (auto const* fs = req.staleness.fixed()) {
      require(*fs >= 0 && *fs <= 2, errc::invalid_argument, "solver: fixed staleness {} is outside [0, 2]", *fs);
      stal = {*fs};
    }
    // Score every candidate; plans are built only for the `count` best.
    struct scored {
      double tta;
      std::size_t order;
      table const* t;
      batch_set const* b;
      int s;
      prediction pr;
    };
    auto const better = [](scored const& a, scored const& b) {
      return a.tta < b.tta || (a.tta == b.tta && a.order < b.order);
    };
    std::size_t const want = std::max<std::size_t>(count, 1);
    std::vector<scored> all;
    std::size_t order = 0;
    for (table const* t : tabs) {
      stage_seconds const base = pipeline_seconds(*t, bw);
      double const d = effective_density(t->codec.codec, p_.exchange, p_.links.front().group);
      for (auto const& b : batch_sets) {
        stage_seconds st = base;
        st.compute = b.compute;
        for (int s : stal) {
          prediction pr = predict_from(st, b.global, d, s);
          pr.bytes_per_step = t->bytes_per_step;
          ++order;
          if (!std::isfinite(pr.time_to_accuracy)) continue;
          scored const c{pr.time_to_accuracy, order, t, &b, s, pr};
          if (want == 1 && !all.empty()) {
            if (better(c, all.front())) all.front() = c;
          } else {
            all.push_back(c);
          }
        }
      }
    }
    require(!all.empty(), errc::unsupported,
            "solver: no feasible configuration: every candidate is refused by the batch caps or the efficiency "
            "curve (densities below its sparsest point {}); add candidates or relax the fixed fields",
            p_.efficiency.compression_curve.back().first);
    std::size_t const keep = std::min(want, all.size());
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end(), better);
    std::vector<plan> out;
    for (std::size_t i = 0; i < keep; ++i) {
      auto const& c = all[i];
      out.push_back(plan{c.t->codec.codec, c.b->global, *c.b->split, c.t->cap, c.s, c.pr});
    }
    return out;
  }

  /// Predicts any complete configuration (the brute-force reference and static baselines use it).
  [[nodiscard]] prediction predict(plan const& c, std::span<double const> bandwidths = {}) const {
    std::vector<double> const bw = check_bandwidths(bandwidths);
    check_fixed_batches(c.batches, nullptr);
    require(c.staleness >= 0 && c.staleness <= 2, errc::invalid_argument, "solver: staleness {} is outside [0, 2]",
            c.staleness);
    require(c.bucket_cap_bytes > 0, errc::invalid_argument, "solver: bucket_cap_bytes must be > 0");
    validate(c.codec);
    // A candidate's precomputed table, else one built for this configuration.
    table own;
    table const* tp = nullptr;
    for (auto const& x : tables_)
      if (x.cap == c.bucket_cap_bytes && x.codec.codec == c.codec) tp = &x;
    if (!tp) {
      own = make_table(c.bucket_cap_bytes, candidate_for(c.codec));
      tp = &own;
    }
    table const& t = *tp;
    stage_seconds st = pipeline_seconds(t, bw);
    st.compute = compute_seconds(p_.workers, c.batches);
    std::size_t g = 0;
    for (std::size_t x : c.batches) g += x;
    prediction pr = predict_from(st, g, effective_density(c.codec, p_.exchange, p_.links.front().group), c.staleness);
    pr.bytes_per_step = t.bytes_per_step;
    return pr;
  }

 private:
  struct bucket_cost {
    double dense_bytes = 0;
    bool compressed = true;
    std::vector<exchange_phase> phases{};  // one after the other; each per link level
  };
  struct table {
    std::size_t cap = 0;
    codec_candidate codec{};
    std::vector<bucket_cost> buckets{};
    double bytes_per_step = 0;
    double apply_fraction = 1;  // of compressed buckets' dense optimizer cost
  };

  prediction predict_from(stage_seconds const& st, std::size_t g, double d, int s) const {
    prediction pr;
    pr.stages = st;
    pr.step_seconds = step_seconds(st, s);
    pr.steps_to_target = p_.efficiency.steps(g, d, s);
    pr.time_to_accuracy = pr.steps_to_target * pr.step_seconds;
    return pr;
  }

  stage_seconds pipeline_seconds(table const& t, std::vector<double> const& bw) const {
    stage_seconds st;
    double c0 = 0, c1 = 0, c2 = 0;  // flow_shop's recurrence, streamed
    for (auto const& b : t.buckets) {
      double const e = b.compressed ? b.dense_bytes * t.codec.encode_seconds_per_byte : 0;
      double x = 0;
      for (auto const& ph : b.phases) {
        double slowest = 0;
        for (std::size_t l = 0; l < ph.size(); ++l)
          slowest =
              std::max(slowest, (ph[l].bytes + ph[l].received) / bw[l] + ph[l].messages * p_.links[l].latency_seconds);
        x += slowest;
      }
      double const o = b.dense_bytes * p_.apply_seconds_per_byte * (b.compressed ? t.apply_fraction : 1.0);
      st.encode += e;
      st.exchange += x;
      st.apply += o;
      c0 += e;
      c1 = std::max(c0, c1) + x;
      c2 = std::max(c1, c2) + o;
    }
    st.pipelined = c2;
    return st;
  }

  table make_table(std::size_t cap, codec_candidate const& c) const {
    bucket_options o = p_.bucketing;
    o.cap_bytes = cap;
    o.first_cap_bytes = std::min(o.first_cap_bytes, cap);
    bucket_plan const bp(p_.model, o);
    table t{cap, c, {}, 0, 1};
    bool const tiers = p_.exchange == exchange_kind::hierarchical;
    // Sparse sums: the union of the frames that were gathered, one per rank (flat) or per leader.
    double const frames_summed =
        static_cast<double>(tiers ? p_.workers.size() / p_.links.front().group : p_.workers.size());
    if (p_.sparse_apply && gathers(c.codec)) t.apply_fraction = std::min(1.0, frames_summed * density(c.codec));
    std::span<link_level const> const links(p_.links);
    for (auto const& b : bp.buckets()) {
      bucket_cost bc{static_cast<double>(b.bytes), b.compressed, {}};
      codec_value const& cv = b.compressed ? c.codec : codec_value{identity{}};
      if (!tiers) {
        bc.phases = flat_exchange(cv, b.elements, links);
      } else {
        // fp32 to the leader and back on the groups' path, around the leaders' collective of the
        // group's sum over the outer levels (re-encoded: sparse frames restart at one per leader).
        exchange_phase lead(links.size());
        lead[0] = leader_traffic(b.elements, links[0].group);
        bc.phases.push_back(std::move(lead));
        for (auto& outer : flat_exchange(cv, b.elements, links.subspan(1))) {
          outer.insert(outer.begin(), traffic{});
          bc.phases.push_back(std::move(outer));
        }
      }
      // Bytes the busiest rank sends: its own link's load (a leader's, in two tiers).
      for (auto const& ph : bc.phases)
        for (std::size_t l = 0; l < ph.size(); ++l)
          if (l == 0 || (tiers && l == 1)) t.bytes_per_step += ph[l].bytes;
      t.buckets.push_back(std::move(bc));
    }
    return t;
  }

  bool has_codec(codec_value const& c) const {
    return std::any_of(p_.codecs.begin(), p_.codecs.end(), [&](auto const& x) { return x.codec == c; });
  }
  bool has_cap(std::size_t cap) const {
    return std::find(p_.bucket_caps.begin(), p_.bucket_caps.end(), cap) != p_.bucket_caps.end();
  }
  // A codec's CPU rate: its candidate's, else that of a candidate of the same kind, else the
  // slowest listed (conservative).
  codec_candidate candidate_for(codec_value const& c) const {
    double slowest = 0;
    for (auto const& x : p_.codecs)
      if (x.codec == c) return x;
    for (auto const& x : p_.codecs)
      if (x.codec.index() == c.index()) return {c, x.encode_seconds_per_byte};
    for (auto const& x : p_.codecs) slowest = std::max(slowest, x.encode_seconds_per_byte);
    return {c, slowest};
  }

  std::size_t total_room() const noexcept {
    std::size_t room = 0;
    for (auto const& x : p_.workers)
      room = x.max_batch > std::numeric_limits<std::size_t>::max() - room ? std::numeric_limits<std::size_t>::max()
                                                                          : room + x.max_batch;
    return room;
  }

  void check_fixed_batches(std::vector<std::size_t> const& b, std::size_t const* global) const {
    require(b.size() == p_.workers.size(), errc::invalid_argument,
            "solver: {} fixed batch sizes for {} workers; give one per worker", b.size(), p_.workers.size());
    std::size_t g = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      require(b[i] >= 1 && b[i] <= p_.workers[i].max_batch, errc::invalid_argument,
              "solver: worker {} batch {} is outside [1, {}] (its memory cap)", i, b[i], p_.workers[i].max_batch);
      g += b[i];
    }
    if (global)
      require(*global == g, errc::invalid_argument,
              "solver: fixed batches sum to {} but global_batch is fixed at {}; fix one of them", g, *global);
  }

  std::vector<double> check_bandwidths(std::span<double const> bandwidths) const {
    if (bandwidths.empty()) return configured_bandwidths();
    require(bandwidths.size() == p_.links.size(), errc::invalid_argument,
            "solver: {} bandwidths for {} link levels; give one per level", bandwidths.size(), p_.links.size());
    for (std::size_t l = 0; l < bandwidths.size(); ++l)
      require(std::isfinite(bandwidths[l]) && bandwidths[l] > 0, errc::invalid_argument,
              "solver: bandwidth {} B/s of link level {} must be finite and > 0", bandwidths[l], l);
    return {bandwidths.begin(), bandwidths.end()};
  }

  void validate_problem() const {
    require(!p_.workers.empty(), errc::invalid_argument, "solver: no workers; describe at least one");
    for (std::size_t i = 0; i < p_.workers.size(); ++i) {
      p_.workers[i].compute.validate(i);
      require(p_.workers[i].max_batch >= 1, errc::invalid_argument, "solver: worker {} has max_batch 0", i);
    }
    require(!p_.links.empty(), errc::invalid_argument, "solver: no link levels; describe at least one");
    std::size_t ranks = 1;
    for (std::size_t l = 0; l < p_.links.size(); ++l) {
      auto const& k = p_.links[l];
      require(k.group >= 1, errc::invalid_argument, "solver: link level {} has group 0", l);
      require(std::isfinite(k.bytes_per_second) && k.bytes_per_second > 0, errc::invalid_argument,
              "solver: link level {} has bandwidth {} B/s; it must be finite and > 0", l, k.bytes_per_second);
      require(std::isfinite(k.latency_seconds) && k.latency_seconds >= 0, errc::invalid_argument,
              "solver: link level {} has latency {} s; it must be finite and >= 0", l, k.latency_seconds);
      ranks *= k.group;
    }
    require(ranks == p_.workers.size(), errc::invalid_argument,
            "solver: link groups multiply to {} ranks but there are {} workers", ranks, p_.workers.size());
    require(p_.exchange == exchange_kind::flat || p_.links.size() >= 2, errc::invalid_argument,
            "solver: exchange hierarchical needs two link levels (the groups' path first, then the leaders'); "
            "{} given",
            p_.links.size());
    require(p_.model.total_elements() > 0, errc::invalid_argument, "solver: the model layout has no elements");
    require(!p_.codecs.empty(), errc::invalid_argument, "solver: no codec candidates; list at least identity{{}}");
    for (auto const& c : p_.codecs) {
      validate(c.codec);
      require(std::isfinite(c.encode_seconds_per_byte) && c.encode_seconds_per_byte >= 0, errc::invalid_argument,
              "solver: codec {} has encode_seconds_per_byte {}; it must be finite and >= 0", c.codec,
              c.encode_seconds_per_byte);
    }
    require(!p_.global_batches.empty(), errc::invalid_argument, "solver: no global batch candidates");
    for (std::size_t g : p_.global_batches)
      require(g > 0, errc::invalid_argument, "solver: global batch candidate 0; batches are >= 1 sample");
    require(!p_.bucket_caps.empty(), errc::invalid_argument, "solver: no bucket cap candidates");
    for (std::size_t c : p_.bucket_caps)
      require(c > 0, errc::invalid_argument, "solver: bucket cap candidate 0; caps are > 0 bytes");
    require(!p_.staleness.empty(), errc::invalid_argument, "solver: no staleness candidates; list 0");
    for (int s : p_.staleness)
      require(s >= 0 && s <= 2, errc::invalid_argument, "solver: staleness candidate {} is outside [0, 2]", s);
    require(std::isfinite(p_.apply_seconds_per_byte) && p_.apply_seconds_per_byte >= 0, errc::invalid_argument,
            "solver: apply_seconds_per_byte {} must be finite and >= 0", p_.apply_seconds_per_byte);
    p_.efficiency.validate();
  }

  problem p_;
  std::vector<table> tables_{};
  std::vector<std::vector<std::size_t>> allocations_{};
};

/// A problem of two or more link levels solved for each exchange, and the one whose plan reaches
/// the target sooner.
struct exchange_choice {
  exchange_kind exchange = exchange_kind::flat;  ///< the sooner (ties: flat, which has no leader hop)
  plan flat{};                                   ///< the best plan of sluice::by_codec over every rank
  plan hierarchical{};  ///< the best plan of sluice::by_hierarchical{.group_size = links[0].group}
  [[nodiscard]] plan const& chosen() const noexcept { return exchange == exchange_kind::flat ? flat : hierarchical; }
};

/// Solves `p` (whatever its `exchange`) flat and hierarchical for the request at these bandwidths
/// (empty: the configured ones). A pipeline's exchange is part of its type, so this is a choice
/// made before it is built (sluice-plan's "exchange": "auto"); the controller then solves with
/// the chosen one fixed. errc::invalid_argument for fewer than two link levels, and what
/// solver::solve raises.
inline exchange_choice choose_exchange(problem p, config_request const& req, std::span<double const> bandwidths = {}) {
  require(p.links.size() >= 2, errc::invalid_argument,
          "choose_exchange: {} link level(s); a hierarchical exchange needs two (the groups' path first, then the "
          "leaders')",
          p.links.size());
  exchange_choice c;
  p.exchange = exchange_kind::flat;
  c.flat = solver(p).solve(req, bandwidths);
  p.exchange = exchange_kind::hierarchical;
  c.hierarchical = solver(std::move(p)).solve(req, bandwidths);
  if (c.hierarchical.predicted.time_to_accuracy < c.flat.predicted.time_to_accuracy)
    c.exchange = exchange_kind::hierarchical;
  return c;
}

}  // namespace sluice
