// libFuzzer target for the pipeline's checkpoint: everything pipeline::restore parses before it
// changes anything (the record and each value it holds, the error-feedback state, every bucket's
// optimizer state and pending sum), against the shape of a real attached pipeline. The first byte
// picks raw input (resealed or not) or edits of a valid checkpoint (resealed), so mutations reach
// every field check. The only acceptable failure is a sluice::error of errc::malformed_message or
// errc::size_mismatch.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

#include "reseal.hpp"

namespace {

using test_pipeline = sluice::pipeline<sluice::top_k, sluice::residual, sluice::adam, sluice::local_transport>;

// A one-rank pipeline at staleness 2, four steps in (sums pending), and its checkpoints. The model
// is small (a 12 x 16 weight in three compressed buckets of 64, a bypassed bias): every execution
// copies, reseals and checks a whole checkpoint, so its size sets the rate (1,828 executions/s
// with a 2,600-element model, 23,871 with this one, on one core).
struct fixture {
  sluice::layout model;
  std::vector<std::vector<float>> params;
  std::vector<std::span<float>> spans;
  std::unique_ptr<test_pipeline> pipe;
  std::vector<std::byte> pending, synced;
  sluice::detail::pipeline::checkpoint_shape shape;

  fixture() {
    model.add("w", {12, 16});
    model.add("b", {12});
    params = {std::vector<float>(12 * 16, 0.5f), std::vector<float>(12, 0.25f)};
    for (auto& p : params) spans.emplace_back(p);
    pipe = std::make_unique<test_pipeline>(
        sluice::top_k{.ratio = 0.05}, sluice::residual{}, sluice::adam{},
        std::move(sluice::local_transport::create(1)[0]),
        sluice::pipeline_options{.staleness = 2,
                                 .bucketing = {.cap_bytes = 256, .first_cap_bytes = 256, .bypass_below_elements = 64}});
    pipe->attach(model, spans);
    std::vector<float> gw(12 * 16), gb(12);
    for (int s = 0; s < 4; ++s) {
      for (std::size_t i = 0; i < gw.size(); ++i)
        gw[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(s)) % 13) - 6;
      std::vector<std::span<float const>> g{gw, gb};
      pipe->step(g);
    }
    pending = pipe->save();
    pipe->synchronize();
    synced = pipe->save();
    std::memcpy(&shape.config, pending.data() + 8, 8);
    std::memcpy(&shape.layout, pending.data() + 16, 8);
    shape.staleness = 2;
    for (auto const& p : params) shape.user.push_back(p.size());
    for (auto const& b : pipe->plan().buckets()) {
      shape.master += b.elements;
      shape.bucket_elements.push_back(b.elements);
      shape.bucket_sparse.push_back(b.compressed ? 1 : 0);
    }
  }
};

using sluice::fuzz::reseal;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  static fixture f;
  if (size == 0) return 0;
  std::vector<std::byte> in(size - 1);
  if (size > 1) std::memcpy(in.data(), data + 1, size - 1);
  std::vector<std::byte> bytes;
  switch (data[0] % 4) {
    case 0:  // raw
      bytes = in;
      break;
    case 1:  // raw, resealed
      bytes = in;
      reseal(bytes);
      break;
    default: {  // (offset, byte) edits of a valid checkpoint, resealed
      bytes = data[0] % 4 == 2 ? f.pending : f.synced;
      for (std::size_t i = 0; i + 2 < in.size(); i += 3) {
        std::size_t const at =
            (static_cast<std::size_t>(in[i]) << 8 | static_cast<std::size_t>(in[i + 1])) % bytes.size();
        bytes[at] = in[i + 2];
      }
      reseal(bytes);
    }
  }
  try {
    auto c = sluice::detail::pipeline::read_checkpoint(bytes, f.shape, "fuzz");
    sluice::feedback_state fs = f.pipe->residuals();
    fs.restore(c.feedback);
    for (std::size_t b = 0; b < c.buckets.size(); ++b) {
      sluice::optimizer_state<sluice::adam> os(sluice::adam{}, f.shape.bucket_elements[b],
                                               static_cast<std::uint32_t>(b));
      os.restore(c.buckets[b].optimizer);
    }
  } catch (sluice::error const& e) {
    if (e.code() != sluice::errc::malformed_message && e.code() != sluice::errc::size_mismatch) __builtin_trap();
  }
  return 0;
}
