// The controller: rank 0 re-solves the configuration from its bandwidth estimates, and when a
// better one clears the hysteresis it broadcasts it with the step at which it takes effect; every
// rank switches at that step, so all ranks always run the same configuration. Every switch is
// logged with its reason on every rank.
//
// Integration (one controller per rank, same problem and request on every rank):
//   sluice::controller ctl(solver, request, options);
//   for (std::uint64_t step = 0;; ++step) {
//     double const bw = monitor.link_estimate();
//     sluice::plan const& cfg = ctl.step(transport, step, std::span(&bw, 1));  // collective call
//     ... run the step with cfg.codec, cfg.batches[rank], cfg.bucket_cap_bytes, cfg.staleness ...
//   }
// step() must be called by every rank for every step, in order. On steps that are multiples of
// decide_every it exchanges one small message from rank 0 to each other rank (tag options().tag).
// Only rank 0's bandwidths are used. Switching the codec mid-run keeps the error-feedback residual:
// residuals are per tensor, independent of the codec, so the next step compensates as usual.
//
// Agreement and message checks: at its first step() every rank sends rank 0 a fingerprint of its
// problem (workers, links, model, codec candidates, ...), request, options, world size and first
// plan; rank 0 answers each rank with the list of ranks whose fingerprint differs from its own,
// and every rank raises errc::invalid_argument when that list is not empty. Every message is a
// sealed record (checksum) naming its kind, origin and destination rank, step, the fingerprint and
// a digest of the sender's switch state; a receiver refuses (errc::malformed_message) a message
// that fails any check, or a switch that the agreed problem and options cannot produce (a codec,
// batch, cap or staleness outside the candidates, an effective step other than step +
// switch_delay, a `from` other than the plan in force, a switch before min_dwell).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sluice/core/error.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/solver/solve.hpp>
#include <sluice/transport/concepts.hpp>

namespace sluice {

/// How often and how reluctantly the controller switches.
struct controller_options {
  std::uint64_t decide_every = 1;  ///< rank 0 decides (one broadcast) every this many steps, >= 1
  std::uint64_t switch_delay = 2;  ///< a switch decided at step t takes effect at step t + switch_delay, >= 1
  double min_gain = 0.05;       ///< switch only when predicted time-to-accuracy drops by more than this fraction, >= 0
  std::uint64_t min_dwell = 8;  ///< steps after a switch before the next may be decided
  message_tag tag{tag_limit - 16};           ///< tag of the controller's messages (keep it apart from collectives')
  std::chrono::milliseconds timeout{60000};  ///< deadline of each receive
};

/// One configuration switch, as logged on every rank.
struct switch_event {
  std::uint64_t decided_step = 0;    ///< step at which rank 0 decided
  std::uint64_t effective_step = 0;  ///< first step run with `to`
  plan from{}, to{};                 ///< predictions are rank 0's at the decision
  std::string reason{};              ///< why, in words, with the numbers
};

namespace detail {

inline void put_codec(std::vector<std::byte>& out, codec_value const& codec) {
  using serial::put;
  put(out, static_cast<std::uint8_t>(codec.index()));
  std::visit(
      [&](auto const& c) {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, top_k>) put(out, c.ratio);
        if constexpr (std::is_same_v<C, block_top_k>) {
          put(out, c.ratio);
          put(out, static_cast<std::uint64_t>(c.block));
          put(out, static_cast<std::uint8_t>(c.score));
        }
        if constexpr (std::is_same_v<C, maxmin_quantize>) {
          put(out, static_cast<std::uint32_t>(c.bits));
          put(out, static_cast<std::uint64_t>(c.bucket));
          put(out, static_cast<std::uint8_t>(c.round));
        }
      },
      codec);
}

inline void put_plan(std::vector<std::byte>& out, plan const& p) {
  using serial::put;
  put_codec(out, p.codec);
  put(out, static_cast<std::uint64_t>(p.global_batch));
  put(out, static_cast<std::uint32_t>(p.batches.size()));
  for (std::size_t b : p.batches) put(out, static_cast<std::uint64_t>(b));
  put(out, static_cast<std::uint64_t>(p.bucket_cap_bytes));
  put(out, static_cast<std::int32_t>(p.staleness));
  put(out, p.predicted.step_seconds);
  put(out, p.predicted.time_to_accuracy);
}

// Reads a plan for `workers` ranks; false for anything put_plan never writes (an unknown codec
// kind or enum value, an invalid codec, batches that do not sum to the global batch, a cap of 0,
// staleness outside [0, 2], non-finite or negative predictions).
inline bool get_plan(serial::reader& r, plan& p, std::size_t workers) {
  std::uint8_t kind = 0;
  if (!r.get(kind)) return false;
  if (kind == 0) {
    p.codec = identity{};
  } else if (kind == 1) {
    top_k c;
    if (!r.get(c.ratio)) return false;
    p.codec = c;
  } else if (kind == 2) {
    block_top_k c;
    std::uint64_t block = 0;
    std::uint8_t score = 0;
    if (!r.get(c.ratio) || !r.get(block) || !r.get(score) || score > 1) return false;
    c.block = static_cast<std::size_t>(block);
    c.score = static_cast<block_score>(score);
    p.codec = c;
  } else if (kind == 3) {
    maxmin_quantize c;
    std::uint32_t bits = 0;
    std::uint64_t bucket = 0;
    std::uint8_t round = 0;
    if (!r.get(bits) || !r.get(bucket) || !r.get(round) || round > 1) return false;
    c.bits = bits;
    c.bucket = static_cast<std::size_t>(bucket);
    c.round = static_cast<rounding>(round);
    p.codec = c;
  } else {
    return false;
  }
  std::uint64_t g = 0, cap = 0;
  std::uint32_t n = 0;
  std::int32_t s = 0;
  if (!r.get(g) || !r.get(n) || n != workers) return false;
  p.batches.resize(n);
  std::uint64_t sum = 0;
  for (auto& b : p.batches) {
    std::uint64_t v = 0;
    if (!r.get(v) || v == 0 || v > g) return false;
    b = static_cast<std::size_t>(v);
    sum += v;
  }
  if (!r.get(cap) || !r.get(s) || !r.get(p.predicted.step_seconds) || !r.get(p.predicted.time_to_accuracy))
    return false;
  p.global_batch = static_cast<std::size_t>(g);
  p.bucket_cap_bytes = static_cast<std::size_t>(cap);
  p.staleness = s;
  try {
    validate(p.codec);
  } catch (error const&) {
    return false;
  }
  auto const sane = [](double v) { return std::isfinite(v) && v >= 0; };
  return sum == g && cap > 0 && s >= 0 && s <= 2 && sane(p.predicted.step_seconds) &&
         sane(p.predicted.time_to_accuracy);
}

/// The controller's messages (sealed records, core/serial.hpp): u32 "SCTL", u16 version 1, u8 kind,
/// u8 0, u16 0, u32 origin rank, u32 destination rank, u64 step, u64 agreement fingerprint, u64
/// digest of the sender's switch state, then by kind: hello nothing; verdict u32 count and that
/// many u32 ranks whose fingerprint differs from rank 0's; decision u8 switch (0 or 1) and, for a
/// switch, u64 effective step, the `from` and `to` plans and u32 length + the reason's bytes; then
/// the u64 checksum.
namespace controller_wire {

inline constexpr std::uint32_t magic = 0x4c544353u;  // "SCTL" little-endian
inline constexpr std::uint16_t version = 1;
inline constexpr std::size_t max_reason_bytes = 4096;

enum class kind : std::uint8_t { hello = 1, verdict = 2, decision = 3 };

struct message {
  kind what = kind::decision;
  std::uint32_t origin = 0, destination = 0;
  std::uint64_t step = 0;
  std::uint64_t agreement = 0;               ///< fingerprint of problem, request, options, world and first plan
  std::uint64_t state = 0;                   ///< digest of the sender's switch state before this message
  std::vector<std::uint32_t> disagreeing{};  ///< verdict: ranks whose fingerprint differs
  bool switches = false;                     ///< decision: a switch follows
  switch_event event{};                      ///< decision with a switch (decided_step = step)
};

inline std::vector<std::byte> encode(message const& m) {
  using serial::put;
  std::vector<std::byte> out;
  serial::start_record(out, magic, version);
  put(out, static_cast<std::uint8_t>(m.what));
  put(out, std::uint8_t{0});
  put(out, std::uint16_t{0});
  put(out, m.origin);
  put(out, m.destination);
  put(out, m.step);
  put(out, m.agreement);
  put(out, m.state);
  if (m.what == kind::verdict) {
    put(out, static_cast<std::uint32_t>(m.disagreeing.size()));
    for (std::uint32_t r : m.disagreeing) put(out, r);
  }
  if (m.what == kind::decision) {
    put(out, static_cast<std::uint8_t>(m.switches ? 1 : 0));
    if (m.switches) {
      put(out, m.event.effective_step);
      put_plan(out, m.event.from);
      put_plan(out, m.event.to);
      std::size_t const len = std::min(m.event.reason.size(), max_reason_bytes);
      put(out, static_cast<std::uint32_t>(len));
      serial::append(out, std::as_bytes(std::span(m.event.reason.data(), len)));
    }
  }
  serial::seal(out);
  return out;
}

/// Parses a message for a world of `workers` ranks. errc::malformed_message, naming the sender,
/// for damaged bytes (checksum), another magic or version, an unknown kind, non-zero reserved
/// bytes, a rank outside the world, a truncated or overlong body, or a plan put_plan never writes.
inline message decode(std::span<std::byte const> bytes, std::size_t workers, int from) {
  std::string const what = fmt::format("controller: message from rank {}", from);
  auto r = serial::open_record(bytes, magic, version, what);
  message m;
  std::uint8_t k = 0, zero8 = 1;
  std::uint16_t zero16 = 1;
  bool ok = r.get(k) && r.get(zero8) && r.get(zero16) && r.get(m.origin) && r.get(m.destination) && r.get(m.step) &&
            r.get(m.agreement) && r.get(m.state);
  require(ok && zero8 == 0 && zero16 == 0 && k >= 1 && k <= 3 && m.origin < workers && m.destination < workers,
          errc::malformed_message, "{}: bad header (kind {}, origin {}, destination {} in a world of {})", what, k,
          m.origin, m.destination, workers);
  m.what = static_cast<kind>(k);
  if (m.what == kind::verdict) {
    std::uint32_t count = 0;
    ok = r.get(count) && count < workers && r.left() == std::size_t{4} * count;
    m.disagreeing.resize(ok ? count : 0);
    for (auto& x : m.disagreeing) ok = ok && r.get(x) && x < workers && x != 0;
  } else if (m.what == kind::decision) {
    std::uint8_t sw = 0;
    ok = r.get(sw) && sw <= 1;
    m.switches = sw == 1;
    if (ok && m.switches) {
      std::uint32_t len = 0;
      std::span<std::byte const> text;
      ok = r.get(m.event.effective_step) && get_plan(r, m.event.from, workers) && get_plan(r, m.event.to, workers) &&
           r.get(len) && len <= max_reason_bytes && r.take(len, text);
      if (ok) m.event.reason.assign(reinterpret_cast<char const*>(text.data()), text.size());
      m.event.decided_step = m.step;
    }
  }
  require(ok && r.left() == 0, errc::malformed_message, "{} for step {}: malformed {} body", what, m.step,
          m.what == kind::hello     ? "hello"
          : m.what == kind::verdict ? "verdict"
                                    : "decision");
  return m;
}

}  // namespace controller_wire

/// Canonical bytes of everything the ranks must agree on before the controller runs: the problem,
/// the request, the options that shape decisions (not the receive timeout) and the world size.
inline std::vector<std::byte> agreement_bytes(problem const& p, config_request const& req, controller_options const& o,
                                              int world) {
  using serial::put;
  std::vector<std::byte> out;
  put(out, static_cast<std::uint32_t>(world));
  put(out, static_cast<std::uint64_t>(p.workers.size()));
  for (auto const& w : p.workers) {
    put(out, w.compute.fixed_seconds);
    put(out, w.compute.per_sample_seconds);
    put(out, static_cast<std::uint64_t>(w.max_batch));
  }
  put(out, static_cast<std::uint64_t>(p.links.size()));
  for (auto const& l : p.links) {
    put(out, static_cast<std::uint64_t>(l.group));
    put(out, l.bytes_per_second);
    put(out, l.latency_seconds);
  }
  auto const model = p.model.serialize();
  put(out, static_cast<std::uint64_t>(model.size()));
  serial::append(out, model);
  put(out, static_cast<std::uint64_t>(p.codecs.size()));
  for (auto const& c : p.codecs) {
    put_codec(out, c.codec);
    put(out, c.encode_seconds_per_byte);
  }
  auto const sizes = [&](std::span<std::size_t const> v) {
    put(out, static_cast<std::uint64_t>(v.size()));
    for (std::size_t x : v) put(out, static_cast<std::uint64_t>(x));
  };
  sizes(p.global_batches);
  sizes(p.bucket_caps);
  put(out, static_cast<std::uint64_t>(p.staleness.size()));
  for (int x : p.staleness) put(out, static_cast<std::int32_t>(x));
  put(out, p.apply_seconds_per_byte);
  put(out, static_cast<std::uint8_t>(p.sparse_apply ? 1 : 0));
  put(out, static_cast<std::uint8_t>(p.exchange));
  auto const& b = p.bucketing;
  for (std::size_t x :
       {b.cap_bytes, b.first_cap_bytes, b.chunk_bytes, b.chunk_alignment, b.bypass_below_elements, b.bypass_max_dims})
    put(out, static_cast<std::uint64_t>(x));
  put(out, static_cast<std::uint8_t>(b.reverse ? 1 : 0));
  auto const& e = p.efficiency;
  put(out, e.reference_steps);
  put(out, e.reference_batch);
  put(out, e.noise_scale);
  put(out, static_cast<std::uint64_t>(e.compression_curve.size()));
  for (auto const& [d, m] : e.compression_curve) {
    put(out, d);
    put(out, m);
  }
  for (double x : e.staleness) put(out, x);
  // The request: each field's presence, then its value.
  put(out, static_cast<std::uint8_t>(req.codec.fixed() ? 1 : 0));
  if (auto const* c = req.codec.fixed()) put_codec(out, *c);
  put(out, static_cast<std::uint8_t>(req.global_batch.fixed() ? 1 : 0));
  if (auto const* g = req.global_batch.fixed()) put(out, static_cast<std::uint64_t>(*g));
  put(out, static_cast<std::uint8_t>(req.batches.fixed() ? 1 : 0));
  if (auto const* v = req.batches.fixed()) sizes(*v);
  put(out, static_cast<std::uint8_t>(req.bucket_cap_bytes.fixed() ? 1 : 0));
  if (auto const* c = req.bucket_cap_bytes.fixed()) put(out, static_cast<std::uint64_t>(*c));
  put(out, static_cast<std::uint8_t>(req.staleness.fixed() ? 1 : 0));
  if (auto const* st = req.staleness.fixed()) put(out, static_cast<std::int32_t>(*st));
  put(out, o.decide_every);
  put(out, o.switch_delay);
  put(out, o.min_gain);
  put(out, o.min_dwell);
  put(out, to_underlying(o.tag));
  return out;
}

}  // namespace detail

namespace detail {
struct controller_access;
}  // namespace detail

/// Keeps all ranks on one configuration and switches them together (see the file comment).
class controller {
 public:
  /// Starts from the solver's choice at the configured bandwidths (the same on every rank).
  controller(solver const& s, config_request req, controller_options o = {})
      : s_(&s), req_(std::move(req)), o_(o), current_(s.solve(req_)) {
    require(o.decide_every >= 1 && o.switch_delay >= 1, errc::invalid_argument,
            "controller: decide_every and switch_delay must be >= 1");
    require(o.min_gain >= 0, errc::invalid_argument, "controller: min_gain {} must be >= 0", o.min_gain);
    require(to_underlying(o.tag) < tag_limit, errc::invalid_argument, "controller: tag {} is not below tag_limit",
            to_underlying(o.tag));
  }

  /// Collective: every rank calls it once per step, in step order, before running `step`. The
  /// first call checks that every rank has the same problem, request, options and first plan
  /// (errc::invalid_argument on every rank, naming the ranks that differ from rank 0). Then it
  /// applies a switch due at this step and (on decision steps) rank 0 decides from `bandwidths`
  /// (bytes/s, one per link level) and tells every rank. Returns the configuration to run this
  /// step with. errc::timeout / peer_lost from the transport; errc::malformed_message for a message
  /// that is damaged, meant for another rank or step, or that states a switch the agreed problem
  /// and options cannot produce.
  template <Transport T>
  plan const& step(T& t, std::uint64_t step, std::span<double const> bandwidths) {
    if (t.size() == 1) return this->step(step, bandwidths);
    if (!agreed_) agree(t, step);
    apply_due(step);
    if (step % o_.decide_every != 0) return current_;
    if (t.rank() == 0) {
      detail::controller_wire::message m;
      m.step = step;
      m.agreement = agreement_;
      m.state = state_digest();
      m.switches = decide(step, bandwidths);
      if (m.switches) m.event = log_.back();
      std::vector<std::vector<std::byte>> msgs;
      for (int peer = 1; peer < t.size(); ++peer) {
        m.destination = static_cast<std::uint32_t>(peer);
        msgs.push_back(detail::controller_wire::encode(m));
      }
      send_all(t, msgs);
    } else {
      auto const bytes = t.recv(0, o_.tag, buf_, deadline::after(o_.timeout));
      receive(t.rank(), t.size(), step, bytes);
    }
    return current_;
  }

  /// The same without a transport, for a single process (or a caller that broadcasts itself):
  /// applies a due switch, decides on decision steps, returns the configuration for `step`.
  plan const& step(std::uint64_t step, std::span<double const> bandwidths) {
    apply_due(step);
    if (step % o_.decide_every == 0) (void)decide(step, bandwidths);
    return current_;
  }

  /// The configuration in force.
  [[nodiscard]] plan const& current() const noexcept { return current_; }
  /// Every switch so far (the last may still be pending).
  [[nodiscard]] std::span<switch_event const> log() const noexcept { return log_; }
  [[nodiscard]] controller_options const& options() const noexcept { return o_; }
  /// The solver and the request rank 0 decides with.
  [[nodiscard]] solver const& decision_solver() const noexcept { return *s_; }
  [[nodiscard]] config_request const& request() const noexcept { return req_; }

 private:
  friend struct detail::controller_access;

  void apply_due(std::uint64_t step) {
    if (pending_ && step >= log_.back().effective_step) {
      current_ = log_.back().to;
      pending_ = false;
    }
  }

  // The fingerprint every rank must share (computed once, at the first step).
  [[nodiscard]] std::uint64_t fingerprint(int world) const {
    auto bytes = detail::agreement_bytes(s_->description(), req_, o_, world);
    detail::put_plan(bytes, first_config());
    return serial::stable_hash(bytes);
  }
  // The first plan without its predictions (floating point may differ in the last bit across
  // builds; the configuration may not).
  [[nodiscard]] plan first_config() const {
    plan p = log_.empty() ? current_ : log_.front().from;
    p.predicted = {};
    return p;
  }

  // What a decision depends on besides the bandwidths: the plan in force, a pending switch and
  // the number of switches (configurations only, predictions left out).
  [[nodiscard]] std::uint64_t state_digest() const {
    std::vector<std::byte> bytes;
    auto const config = [&](plan p) {
      p.predicted = {};
      detail::put_plan(bytes, p);
    };
    config(current_);
    serial::put(bytes, static_cast<std::uint64_t>(log_.size()));
    serial::put(bytes, static_cast<std::uint8_t>(pending_ ? 1 : 0));
    if (pending_) {
      serial::put(bytes, log_.back().effective_step);
      config(log_.back().to);
    }
    return serial::stable_hash(bytes);
  }

  template <Transport T>
  void send_all(T& t, std::vector<std::vector<std::byte>> const& msgs) {
    std::vector<typename T::request> reqs;
    for (int peer = 1; peer < t.size(); ++peer)
      reqs.push_back(t.send(peer, o_.tag, msgs[static_cast<std::size_t>(peer - 1)]));
    auto const d = deadline::after(o_.timeout);
    for (auto& r : reqs) r.wait(d);
  }

  // The first step: every rank sends rank 0 its fingerprint; rank 0 answers each with the ranks
  // that differ from it; every rank raises if any does.
  template <Transport T>
  void agree(T& t, std::uint64_t step) {
    namespace wire = detail::controller_wire;
    int const me = t.rank(), world = t.size();
    require(s_->description().workers.size() == static_cast<std::size_t>(world), errc::invalid_argument,
            "controller: the problem describes {} workers but the transport has {} ranks",
            s_->description().workers.size(), world);
    agreement_ = fingerprint(world);
    std::vector<std::uint32_t> differ;
    if (me == 0) {
      for (int peer = 1; peer < world; ++peer) {
        auto const bytes = t.recv(peer, o_.tag, buf_, deadline::after(o_.timeout));
        auto const m = wire::decode(bytes, static_cast<std::size_t>(world), peer);
        require(m.what == wire::kind::hello && m.origin == static_cast<std::uint32_t>(peer) && m.destination == 0 &&
                    m.step == step,
                errc::malformed_message,
                "controller: rank {}'s first message is not its hello for step {} to rank 0 (kind {}, origin {}, "
                "destination {}, step {}); do all ranks start the controller at the same step?",
                peer, step, static_cast<int>(m.what), m.origin, m.destination, m.step);
        if (m.agreement != agreement_) differ.push_back(static_cast<std::uint32_t>(peer));
      }
      wire::message v{.what = wire::kind::verdict, .step = step, .agreement = agreement_, .disagreeing = differ};
      std::vector<std::vector<std::byte>> msgs;
      for (int peer = 1; peer < world; ++peer) {
        v.destination = static_cast<std::uint32_t>(peer);
        msgs.push_back(wire::encode(v));
      }
      send_all(t, msgs);
    } else {
      wire::message const h{.what = wire::kind::hello,
                            .origin = static_cast<std::uint32_t>(me),
                            .destination = 0,
                            .step = step,
                            .agreement = agreement_};
      auto const bytes = wire::encode(h);
      auto r = t.send(0, o_.tag, bytes);
      r.wait(deadline::after(o_.timeout));
      auto const in = t.recv(0, o_.tag, buf_, deadline::after(o_.timeout));
      auto const v = wire::decode(in, static_cast<std::size_t>(world), 0);
      require(v.what == wire::kind::verdict && v.origin == 0 && v.destination == static_cast<std::uint32_t>(me) &&
                  v.step == step,
              errc::malformed_message,
              "controller: rank 0's first message is not its verdict for step {} to rank {} (kind {}, origin {}, "
              "destination {}, step {})",
              step, me, static_cast<int>(v.what), v.origin, v.destination, v.step);
      differ = v.disagreeing;
      bool const mine = v.agreement != agreement_;
      bool const listed = std::find(differ.begin(), differ.end(), static_cast<std::uint32_t>(me)) != differ.end();
      require(mine == listed, errc::malformed_message,
              "controller: rank 0's verdict {} rank {} among the ranks that differ, but its fingerprint {} rank 0's",
              listed ? "lists" : "does not list", me, mine ? "differs from" : "matches");
    }
    require(differ.empty(), errc::invalid_argument,
            "controller: rank(s) {} have another problem, request, options or first plan than rank 0 (fingerprints "
            "differ): other codec candidates, link figures, workers or model? Build every rank's controller from "
            "the same inputs",
            fmt::join(differ, ", "));
    agreed_ = true;
  }

  // Rank 0 (or a single process): decides; returns true and logs the switch when it switches.
  bool decide(std::uint64_t step, std::span<double const> bandwidths) {
    if (pending_ || !(log_.empty() || step >= log_.back().effective_step + o_.min_dwell)) return false;
    plan best = s_->solve(req_, bandwidths);
    plan now = current_;
    now.predicted = s_->predict(current_, bandwidths);
    if (best.same_config(now) ||
        !(best.predicted.time_to_accuracy < now.predicted.time_to_accuracy * (1 - o_.min_gain)))
      return false;
    std::string bw;
    for (double b : bandwidths) bw += fmt::format("{}{:.1f}", bw.empty() ? "" : ", ", b * 8e-6);
    std::string reason = fmt::format(
        "bandwidth [{}] Mbit/s: predicted time-to-accuracy {:.1f} s -> {:.1f} s ({:.1f}% less); codec {} -> {}", bw,
        now.predicted.time_to_accuracy, best.predicted.time_to_accuracy,
        100 * (1 - best.predicted.time_to_accuracy / now.predicted.time_to_accuracy), now.codec, best.codec);
    log_.push_back({step, step + o_.switch_delay, std::move(now), std::move(best), std::move(reason)});
    pending_ = true;
    return true;
  }

  // Other ranks: checks rank 0's message for `step` against everything this rank knows, then
  // applies it. Nothing changes when a check fails.
  void receive(int me, int world, std::uint64_t step, std::span<std::byte const> bytes) {
    namespace wire = detail::controller_wire;
    auto const m = wire::decode(bytes, static_cast<std::size_t>(world), 0);
    auto const bad = [&](std::string_view why) {
      throw_error(errc::malformed_message, "controller: rank 0's message for step {} (to rank {}) {}", step, me, why);
    };
    if (m.what != wire::kind::decision) bad(fmt::format("is of kind {}, not a decision", static_cast<int>(m.what)));
    if (m.origin != 0 || m.destination != static_cast<std::uint32_t>(me))
      bad(fmt::format("names origin {} and destination {}", m.origin, m.destination));
    if (m.step != step) bad(fmt::format("is for step {}; are all ranks at the same step?", m.step));
    if (m.agreement != agreement_) bad("carries another agreement fingerprint");
    if (m.state != state_digest())
      bad("was decided from another switch state (plan in force, pending switch) than this rank's");
    if (!m.switches) return;
    auto const& e = m.event;
    problem const& p = s_->description();
    if (pending_ || !(log_.empty() || step >= log_.back().effective_step + o_.min_dwell))
      bad("switches while a switch is pending or before min_dwell steps have passed");
    if (e.effective_step != step + o_.switch_delay)
      bad(fmt::format("switches at step {}, not at step + switch_delay = {}", e.effective_step,
                      step + o_.switch_delay));
    if (!e.from.same_config(current_))
      bad(fmt::format("switches from {}, but the plan in force is {}", e.from.codec, current_.codec));
    if (e.to.same_config(current_)) bad("switches to the plan in force");
    auto const* fc = req_.codec.fixed();
    bool const codec_ok = fc ? e.to.codec == *fc
                             : std::any_of(p.codecs.begin(), p.codecs.end(),
                                           [&](codec_candidate const& c) { return c.codec == e.to.codec; });
    if (!codec_ok) bad(fmt::format("switches to codec {}, which is not among the candidates", e.to.codec));
    auto const* fg = req_.global_batch.fixed();
    auto const* fb = req_.batches.fixed();
    bool const batch_ok = fb ? e.to.batches == *fb
                             : (fg ? e.to.global_batch == *fg
                                   : std::find(p.global_batches.begin(), p.global_batches.end(), e.to.global_batch) !=
                                         p.global_batches.end());
    if (!batch_ok)
      bad(fmt::format("switches to global batch {}, which is not among the candidates", e.to.global_batch));
    for (std::size_t i = 0; i < e.to.batches.size(); ++i)
      if (e.to.batches[i] > p.workers[i].max_batch)
        bad(fmt::format("gives worker {} a batch of {}, above its max_batch {}", i, e.to.batches[i],
                        p.workers[i].max_batch));
    auto const* fcap = req_.bucket_cap_bytes.fixed();
    bool const cap_ok =
        fcap ? e.to.bucket_cap_bytes == *fcap
             : std::find(p.bucket_caps.begin(), p.bucket_caps.end(), e.to.bucket_cap_bytes) != p.bucket_caps.end();
    if (!cap_ok)
      bad(fmt::format("switches to a bucket cap of {} bytes, not among the candidates", e.to.bucket_cap_bytes));
    auto const* fs = req_.staleness.fixed();
    bool const stale_ok = fs ? e.to.staleness == *fs
                             : std::find(p.staleness.begin(), p.staleness.end(), e.to.staleness) != p.staleness.end();
    if (!stale_ok) bad(fmt::format("switches to staleness {}, not among the candidates", e.to.staleness));
    log_.push_back(e);
    pending_ = true;
  }

  solver const* s_;
  config_request req_;
  controller_options o_;
  plan current_;
  std::vector<switch_event> log_{};
  bool pending_ = false;
  bool agreed_ = false;
  std::uint64_t agreement_ = 0;
  std::vector<std::byte> buf_{};
};

namespace detail {
/// Test and fuzzing access to a controller's receive side.
struct controller_access {
  static void agree_locally(controller& c, int world) {
    c.agreement_ = c.fingerprint(world);
    c.agreed_ = true;
  }
  static void receive(controller& c, int me, int world, std::uint64_t step, std::span<std::byte const> bytes) {
    c.receive(me, world, step, bytes);
  }
  static std::uint64_t agreement(controller const& c) { return c.agreement_; }
  static std::uint64_t state_digest(controller const& c) { return c.state_digest(); }
};
}  // namespace detail

}  // namespace sluice
