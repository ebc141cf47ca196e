// What the ranks of one pipeline agree on before gradients move: at attach, the layout and the
// configuration's identity (rank 0 judges, every rank raises the same error) and the run id;
// rank 0's parameters; and, before the first exchange after attach or restore, that every rank
// continues the same run from the same step (checkpoints of two runs never mix).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sluice/bucket/layout.hpp>
#include <sluice/collective/concepts.hpp>
#include <sluice/collective/detail/message.hpp>
#include <sluice/config.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/pipeline/options.hpp>
#include <sluice/transport/concepts.hpp>

namespace sluice::detail::pipeline {

SLUICE_DECL void throw_verdict(std::span<std::byte const> verdict);

/// A run id no other attach draws: std::random_device and the clock, hashed with the configuration.
SLUICE_DECL std::uint64_t draw_run_id(std::uint64_t config);

/// Every rank sends `mine` to rank 0 on `ask`; rank 0 calls judge(p, theirs) for each (a throw is
/// the verdict) and answers every rank on `answer` with byte 0 then `ok_payload`, or the error's
/// code and text. Returns the payload on every rank, or raises rank 0's verdict on every rank.
template <class Tr, class Judge>
std::vector<std::byte> judged_by_root(Tr& t, std::span<std::byte const> mine, message_tag ask, message_tag answer,
                                      std::span<std::byte const> ok_payload, Judge const& judge,
                                      std::chrono::milliseconds timeout, char const* what) {
  int const n = t.size(), r = t.rank();
  deadline const d = deadline::after(timeout);
  collective_context const ctx{.timeout = timeout, .tag = ask};
  std::vector<std::byte> buf;
  if (r != 0) {
    detail::send_set<Tr> sends(t, 1);  // settled on every way out: `mine` outlives it
    sends.start(0, ask, mine, what, ctx);
    auto const verdict = t.recv(0, answer, buf, d);
    sends.wait_all(d, what, ctx);
    require(!verdict.empty(), errc::malformed_message, "{}: empty verdict from rank 0", what);
    if (verdict[0] != std::byte{0}) throw_verdict(verdict);
    return {verdict.begin() + 1, verdict.end()};
  }
  std::vector<std::byte> verdict{std::byte{0}};
  verdict.insert(verdict.end(), ok_payload.begin(), ok_payload.end());
  for (int p = 1; p < n; ++p) {
    auto const theirs = t.recv(p, ask, buf, d);
    if (verdict[0] != std::byte{0}) continue;
    try {
      judge(p, theirs);
    } catch (error const& e) {
      std::string const text = e.what();
      verdict.assign(1, static_cast<std::byte>(static_cast<int>(e.kind())));
      auto const* c = reinterpret_cast<std::byte const*>(text.data());
      verdict.insert(verdict.end(), c, c + text.size());
    }
  }
  {
    detail::send_set<Tr> sends(t, static_cast<std::size_t>(n - 1));
    for (int p = 1; p < n; ++p) sends.start(p, answer, verdict, what, ctx);
    sends.wait_all(d, what, ctx);
  }
  if (verdict[0] != std::byte{0}) throw_verdict(verdict);
  return {ok_payload.begin(), ok_payload.end()};
}

/// attach(): every rank's layout and configuration identity against rank 0's (errc::size_mismatch
/// naming the first differing tensor, or the configuration, on every rank). Returns the run id
/// rank 0 drew, the same on every rank.
template <class Tr>
std::uint64_t agree_on_attach(Tr& t, layout const& l, std::uint64_t config, std::string_view describe,
                              std::chrono::milliseconds timeout) {
  std::uint64_t run = draw_run_id(config);
  if (t.size() == 1) return run;
  std::vector<std::byte> mine = l.serialize();
  serial::put<std::uint64_t>(mine, config);
  std::vector<std::byte> payload;
  serial::put<std::uint64_t>(payload, run);
  auto const judge = [&](int p, std::span<std::byte const> theirs) {
    require(theirs.size() >= 8, errc::malformed_message, "pipeline::attach: rank {} sent a truncated layout", p);
    layouts_must_match(std::span<std::byte const>(mine).first(mine.size() - 8), 0, theirs.first(theirs.size() - 8), p);
    std::uint64_t cfg = 0;
    std::memcpy(&cfg, theirs.data() + theirs.size() - 8, 8);
    require(cfg == config, errc::size_mismatch,
            "pipeline::attach: rank {} was built with other policies, options or world size than rank 0 ({})", p,
            describe);
  };
  auto const got = judged_by_root(t, mine, pipeline_tags::attach, pipeline_tags::attach_verdict, payload, judge,
                                  timeout, "pipeline::attach");
  require(got.size() == 8, errc::malformed_message, "pipeline::attach: rank 0's verdict carries {} bytes of run id",
          got.size());
  std::memcpy(&run, got.data(), 8);
  return run;
}

/// Before the first exchange after attach (or a restore), and before a step whose batch sizes
/// changed: every rank continues run `run` from step `step` with the batch sizes `batches`
/// (their identity) as rank 0 does, or every rank raises errc::size_mismatch (a rank restored a
/// checkpoint of another run or step, restored where the others did not, or set other batches).
template <class Tr>
void agree_on_resume(Tr& t, std::uint64_t run, std::uint64_t step, std::uint64_t batches,
                     std::chrono::milliseconds timeout) {
  if (t.size() == 1) return;
  std::vector<std::byte> mine;
  serial::put<std::uint64_t>(mine, run);
  serial::put<std::uint64_t>(mine, step);
  serial::put<std::uint64_t>(mine, batches);
  auto const judge = [&](int p, std::span<std::byte const> theirs) {
    std::uint64_t their_run = 0, their_step = 0, their_batches = 0;
    serial::reader rd(theirs);
    require(rd.get(their_run) && rd.get(their_step) && rd.get(their_batches) && rd.left() == 0, errc::malformed_message,
            "pipeline: rank {} sent a malformed run id", p);
    require(their_run == run && their_step == step, errc::size_mismatch,
            "pipeline: rank {} continues run {:016x} at step {}, rank 0 run {:016x} at step {}; restore checkpoints of "
            "one run and one step on every rank (pipeline::save() on every rank at the same step), or none",
            p, their_run, their_step, run, step);
    require(their_batches == batches, errc::size_mismatch,
            "pipeline: rank {} runs step {} with other batch sizes than rank 0; call set_batch_sizes with the same "
            "sizes on every rank before the same step",
            p, step);
  };
  (void)judged_by_root(t, mine, pipeline_tags::resume, pipeline_tags::resume, {}, judge, timeout, "pipeline: resume");
}

/// This rank's gradient weight b_rank N / sum b for batch sizes `batches` (one per rank, > 0):
/// the mean of the weighted gradients is then sum b_r g_r / sum b.
SLUICE_DECL float batch_weight(std::span<std::size_t const> batches, int rank, int world);

/// The identity of a set of batch sizes (what ranks compare).
SLUICE_DECL std::uint64_t batches_id(std::span<std::size_t const> batches);

/// Rank 0's parameters to every rank, in messages of at most 16 MiB (engines bound a message's
/// size: zmq_options::max_message_bytes), in order on one tag.
template <class Tr>
void broadcast_parameters(Tr& t, std::span<float> master, std::chrono::milliseconds timeout) {
  int const n = t.size(), r = t.rank();
  if (n == 1) return;
  deadline const d = deadline::after(timeout);
  constexpr std::size_t chunk = std::size_t{4} << 20;  // fp32 elements
  char const* const what = "pipeline::attach (parameters)";
  message_tag const tag = pipeline_tags::attach_parameters;
  collective_context const ctx{.timeout = timeout, .tag = tag};
  std::vector<std::byte> buf;
  for (std::size_t at = 0; at < master.size(); at += chunk) {
    auto const part = master.subspan(at, std::min(chunk, master.size() - at));
    if (r == 0) {
      detail::send_set<Tr> sends(t, static_cast<std::size_t>(n - 1));
      for (int p = 1; p < n; ++p) sends.start(p, tag, std::as_bytes(part), what, ctx);
      sends.wait_all(d, what, ctx);
    } else {
      auto const got = t.recv(0, tag, buf, d);
      require(got.size() == part.size_bytes(), errc::malformed_message,
              "pipeline::attach: rank 0 sent {} bytes of parameters at element {}, {} expected", got.size(), at,
              part.size_bytes());
      std::memcpy(part.data(), got.data(), got.size());
    }
  }
}

}  // namespace sluice::detail::pipeline

#if SLUICE_HEADER_ONLY
#include <sluice/pipeline/impl/agreement.ipp>
#endif
