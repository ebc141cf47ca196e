// The pipeline's identity and checkpoints on local worlds of threads: a policy's identity is its
// fields (its printed form may change), a checkpoint's values are checked against what a pipeline
// writes, checkpoints of two runs never mix, and the errors that name what to fix (a non-finite
// gradient names its parameter; skip_step is refused before anything runs).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

#include "pipeline/pipeline_testing.hpp"
#include "support/local_world.hpp"

namespace {

// top_k whose printed form is whatever `label` says: the formatter changes, the value does not.
std::string label = "relabelled_top_k";  // NOLINT: written by the test between two worlds
struct relabelled_top_k : sluice::top_k {
  friend bool operator==(relabelled_top_k const&, relabelled_top_k const&) = default;
};

}  // namespace

template <>
struct fmt::formatter<relabelled_top_k> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(relabelled_top_k const& c, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "{}{{.ratio = {}}}", label, c.ratio);
  }
};

namespace {

using namespace sluice;
using namespace sluice::test;

using test_pipeline = pipeline<relabelled_top_k, residual, sgd, local_transport&>;
relabelled_top_k codec() {
  relabelled_top_k c;
  c.ratio = 0.05;
  return c;
}
constexpr sgd optimizer{.lr = 0.1, .momentum = 0.9};

// Runs `steps` steps on every rank of a world of `n`, restoring `restore[r]` first when it is not
// empty, and returns every rank's checkpoint after the last step (empty on a rank that failed).
std::vector<std::vector<std::byte>> run(int n, int steps, std::vector<std::vector<std::byte>> const& restore,
                                        unsigned staleness, std::vector<std::exception_ptr>* errors_out = nullptr,
                                        bool synchronize = false) {
  std::vector<std::vector<std::byte>> saved(static_cast<std::size_t>(n));
  auto errors = test::run_local(n, [&](local_transport& ep) {
    int const r = ep.rank();
    model_params p(model());
    test_pipeline pipe{codec(), residual{}, optimizer, ep, small_buckets(staleness)};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    if (!restore.empty() && !restore[static_cast<std::size_t>(r)].empty())
      pipe.restore(restore[static_cast<std::size_t>(r)]);
    std::uint64_t const from = pipe.steps();
    std::vector<std::vector<float>> g;
    for (std::uint64_t s = from; s < from + static_cast<std::uint64_t>(steps); ++s) {
      gradients(r, s, p, g);
      pipe.step(views(g));
    }
    if (synchronize) pipe.synchronize();
    saved[static_cast<std::size_t>(r)] = pipe.save();
  });
  if (errors_out != nullptr)
    *errors_out = errors;
  else
    test::rethrow_first(errors);
  return saved;
}

// The checkpoint record: magic u32, version u16, flags u16, configuration, layout, run, steps,
// published (u64 each), ...; the last 8 bytes are the checksum of everything before them.
constexpr std::size_t flags_at = 6, run_at = 24, steps_at = 32, published_at = 40;
template <class U>
std::vector<std::byte> resealed(std::vector<std::byte> bytes, std::size_t at, U value) {
  std::memcpy(bytes.data() + at, &value, sizeof value);
  std::uint64_t const sum = serial::stable_hash(std::span<std::byte const>(bytes).first(bytes.size() - 8));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  return bytes;
}

TEST_CASE("pipeline checkpoint: a policy's identity is its fields, so reformatting it keeps checkpoints") {
  label = "relabelled_top_k";
  auto const saved = run(1, 3, {}, 1);
  std::string before, after;
  label = "top_k_printed_otherwise";
  auto errors = test::run_local(1, [&](local_transport& ep) {
    model_params p(model());
    test_pipeline pipe{codec(), residual{}, optimizer, ep, small_buckets(1)};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    after = pipe.describe();
    pipe.restore(saved[0]);
    CHECK(pipe.steps() == 3);
  });
  test::rethrow_first(errors);
  CHECK(after.find("top_k_printed_otherwise") != std::string::npos);
  // A field that changes is another configuration.
  errors = test::run_local(1, [&](local_transport& ep) {
    model_params p(model());
    auto c = codec();
    c.ratio = 0.06;
    test_pipeline pipe{c, residual{}, optimizer, ep, small_buckets(1)};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    CHECK_THROWS_WITH_AS(pipe.restore(saved[0]), doctest::Contains("other policies"), error);
  });
  test::rethrow_first(errors);
}

TEST_CASE("pipeline checkpoint: pipeline_options' identity is the one checkpoints were saved with") {
  // The hash of pipeline_options{} before its bucket fields moved into .bucketing (main at
  // 9b3e7fb): the same values in the same order, so checkpoints saved then still restore.
  CHECK(serial::hash_of(pipeline_options{}) == 0xf914871655258f96ull);
  pipeline_options const o = small_buckets(2, compensation_method::local_step);
  bucket_options const& b = o.bucketing;
  CHECK(serial::hash_of(o) == serial::hash_of("pipeline_options", o.staleness, b.cap_bytes, b.first_cap_bytes,
                                              b.bypass_below_elements, b.bypass_max_dims, o.seed, o.sparse_apply,
                                              o.compensation));
  // The bucketing fields a pipeline could not set before change what it computes: they count
  // once they differ from the defaults.
  for (auto set : {+[](bucket_options& x) { x.reverse = false; }, +[](bucket_options& x) { x.chunk_bytes = 4096; },
                   +[](bucket_options& x) { x.chunk_alignment = 16; }}) {
    pipeline_options other = o;
    set(other.bucketing);
    CHECK(serial::hash_of(other) != serial::hash_of(o));
  }
  CHECK(fmt::format("{}", pipeline_options{})
            .find(".bucketing = bucket_options{.cap_bytes = 26214400, "
                  ".first_cap_bytes = 1048576,") != std::string::npos);
}

TEST_CASE("pipeline checkpoint: values a pipeline never writes are refused, nothing changes") {
  auto const at2 = run(1, 4, {}, 2);                    // staleness 2: 2 published of 4, sums pending
  auto const synced = run(1, 4, {}, 2, nullptr, true);  // all 4 published, none pending
  struct forged {
    char const* what;
    std::vector<std::byte> bytes;
  };
  std::uint64_t const big = (std::uint64_t{1} << 32) + 3;
  std::vector<forged> const cases = {
      {"steps past 2^32 - 1", resealed(resealed(at2[0], steps_at, big), published_at, big - 2)},
      {"steps 2^64 - 1", resealed(at2[0], steps_at, std::numeric_limits<std::uint64_t>::max())},
      {"more published than steps", resealed(at2[0], published_at, std::uint64_t{5})},
      {"further behind than the staleness", resealed(at2[0], published_at, std::uint64_t{1})},
      {"reserved flags", resealed(at2[0], flags_at, std::uint16_t{4})},
      {"no pending sums for steps - published = 2", resealed(synced[0], published_at, std::uint64_t{2})},
  };
  for (auto const& c : cases) {
    CAPTURE(c.what);
    auto errors = test::run_local(1, [&](local_transport& ep) {
      model_params p(model());
      test_pipeline pipe{codec(), residual{}, optimizer, ep, small_buckets(2)};
      auto spans = p.spans();
      pipe.attach(model(), spans);
      CHECK_THROWS_AS(pipe.restore(c.bytes), error);
      try {
        pipe.restore(c.bytes);
      } catch (error const& e) {
        CHECK(e.code() == errc::malformed_message);
      }
      CHECK(pipe.steps() == 0);
      CHECK(p == model_params(model()));
    });
    test::rethrow_first(errors);
  }
  // The untouched checkpoint restores.
  auto const resumed = run(1, 1, at2, 2);
  CHECK(!resumed[0].empty());
}

TEST_CASE("pipeline checkpoint: checkpoints of two runs, or a restore on one rank only, fail on every rank") {
  constexpr int n = 2;
  auto const a = run(n, 3, {}, 1), b = run(n, 3, {}, 1);
  for (int r = 0; r < n; ++r) CHECK(a[static_cast<std::size_t>(r)] != b[static_cast<std::size_t>(r)]);
  // Same configuration, same step, same bytes but the run id: caught by the run id alone.
  auto mixed = a;
  std::uint64_t run_b = 0;
  std::memcpy(&run_b, b[1].data() + run_at, 8);
  mixed[1] = resealed(a[1], run_at, run_b);
  for (auto const& restore :
       {std::vector<std::vector<std::byte>>{a[0], b[1]}, mixed, std::vector<std::vector<std::byte>>{a[0], {}}}) {
    std::vector<std::exception_ptr> errors;
    (void)run(n, 2, restore, 1, &errors);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      REQUIRE(errors[static_cast<std::size_t>(r)] != nullptr);
      try {
        std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
      } catch (error const& e) {
        CHECK(e.code() == errc::size_mismatch);
        CHECK(std::string(e.what()).find("run") != std::string::npos);
      }
    }
  }
  // The checkpoints of one run continue on every rank.
  (void)run(n, 2, a, 1);
}

TEST_CASE("pipeline: a non-finite gradient names its parameter and element, compressed or bypassed") {
  // In the trainer's memory (found by the read's copy) or in the pipeline's buffers (found by the
  // encode's own pass: no scan before it).
  for (auto home : {gradient_home::trainer, gradient_home::pipeline})
    for (std::size_t tensor : {std::size_t{2}, std::size_t{3}}) {  // fc2.weight (compressed), fc3.weight (bypassed)
      CAPTURE(tensor);
      CAPTURE(home == gradient_home::pipeline);
      auto errors = test::run_local(1, [&](local_transport& ep) {
        model_params p(model());
        pipeline_options o = small_buckets(0);
        o.gradients = home;
        test_pipeline pipe{codec(), residual{}, optimizer, ep, o};
        auto spans = p.spans();
        pipe.attach(model(), spans);
        std::vector<std::vector<float>> g;
        gradients(0, 0, p, g);
        g[tensor][7] = std::numeric_limits<float>::quiet_NaN();
        try {
          if (home == gradient_home::pipeline) {
            auto const into = pipe.gradients();
            for (std::size_t k = g.size(); k-- > 0;) {
              std::copy(g[k].begin(), g[k].end(), into[k].begin());
              pipe.gradient_ready(k);
            }
            pipe.step();
            pipe.synchronize();  // the encode thread's error reaches the next call at the latest
          } else {
            pipe.step(views(g));
          }
          FAIL("a NaN gradient went through");
        } catch (error const& e) {
          CHECK(e.code() == errc::non_finite);
          std::string const what = e.what();
          CHECK(what.find(fmt::format("'{}'", model()[tensor].name)) != std::string::npos);
          CHECK(what.find("element 7") != std::string::npos);
          CHECK(what.find("skip_step") == std::string::npos);  // never the fix the pipeline refuses
        }
      });
      test::rethrow_first(errors);
    }
}

TEST_CASE("pipeline: non_finite_policy::skip_step is refused at construction, with what to use instead") {
  auto ts = local_transport::create(1);
  CHECK_THROWS_WITH_AS((test_pipeline{codec(), residual{.non_finite = non_finite_policy::skip_step}, optimizer, ts[0]}),
                       doctest::Contains("use throw_error"), error);
}

}  // namespace
