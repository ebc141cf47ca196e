// The bodies of feedback/state.hpp: header-only, included at its end; with sluice::kernels,
// compiled there once.
#pragma once

#include <algorithm>
#include <cstring>

#include <fmt/core.h>

#include <sluice/feedback/state.hpp>

namespace sluice {

SLUICE_DECL feedback_state::feedback_state(std::uint16_t kind, std::size_t buffers, element_type precision,
                                           std::span<std::size_t const> extents, std::span<std::string const> names)
    : kind_(kind), buffers_(buffers), precision_(precision) {
  require(buffers <= 2, errc::invalid_argument, "feedback_state: at most 2 buffers per tensor, got {}", buffers);
  require(precision == element_type::f32 || precision == element_type::bf16, errc::invalid_argument,
          "feedback_state: state precision must be f32 or bf16, got {}", to_string(precision));
  require(names.empty() || names.size() == extents.size(), errc::size_mismatch,
          "feedback_state: {} names for {} tensors", names.size(), extents.size());
  tensors_.resize(extents.size());
  for (std::size_t t = 0; t < extents.size(); ++t) {
    auto& te = tensors_[t];
    te.name = names.empty() ? fmt::format("#{}", t) : names[t];
    te.extent = extents[t];
    for (std::size_t b = 0; b < buffers; ++b) {
      if (precision == element_type::f32)
        te.f32[b].assign(extents[t], 0.0f);
      else
        te.bf16[b].assign(extents[t], bfloat16(0.0f));
    }
  }
}

SLUICE_DECL void feedback_state::clear() {
  for (auto& te : tensors_)
    for (std::size_t b = 0; b < buffers_; ++b) {
      std::fill(te.f32[b].begin(), te.f32[b].end(), 0.0f);
      std::fill(te.bf16[b].begin(), te.bf16[b].end(), bfloat16(0.0f));
    }
}

SLUICE_DECL std::vector<std::byte> feedback_state::save() const {
  using detail::feedback::put;
  std::vector<std::byte> out;
  serial::start_record(out, magic, 1);
  put<std::uint16_t>(out, kind_);
  put<std::uint8_t>(out, static_cast<std::uint8_t>(precision_));
  put<std::uint8_t>(out, static_cast<std::uint8_t>(buffers_));
  put<std::uint16_t>(out, 0);
  put<std::uint64_t>(out, tensors_.size());
  put<std::uint64_t>(out, warmup_.steps);
  put<double>(out, warmup_.start);
  put<std::uint64_t>(out, warmup_.stages);
  put<std::uint8_t>(out, static_cast<std::uint8_t>(warmup_.shape));
  for (int i = 0; i < 7; ++i) put<std::uint8_t>(out, 0);
  auto const r = report();
  put<std::uint64_t>(out, r.skipped_calls);
  put<std::uint64_t>(out, r.last_skipped_step);
  put<std::uint64_t>(out, r.last_skipped_tensor);
  put<std::uint64_t>(out, r.non_finite_values);
  for (auto const& te : tensors_) {
    put<std::uint64_t>(out, te.extent);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(te.name.size()));
    put<std::uint32_t>(out, 0);
    detail::feedback::append(out, std::as_bytes(std::span(te.name.data(), te.name.size())));
    for (std::size_t b = 0; b < buffers_; ++b) {
      if (precision_ == element_type::f32)
        detail::feedback::append(out, std::as_bytes(std::span(te.f32[b])));
      else
        detail::feedback::append(out, std::as_bytes(std::span(te.bf16[b])));
    }
  }
  serial::seal(out);
  return out;
}

SLUICE_DECL void feedback_state::restore(std::span<std::byte const> bytes) {
  auto r = serial::open_record(bytes, magic, 1, "feedback checkpoint");
  std::uint16_t kind = 0, zero16 = 0;
  std::uint8_t prec = 0, bufs = 0;
  std::uint64_t count = 0;
  sluice::warmup w;
  std::uint8_t shape = 0;
  std::uint8_t reserved = 0;
  feedback_report rep;
  bool ok = r.get(kind) && r.get(prec) && r.get(bufs) && r.get(zero16) && r.get(count) && r.get(w.steps) &&
            r.get(w.start) && r.get(w.stages) && r.get(shape);
  for (int i = 0; ok && i < 7; ++i) ok = r.get(reserved) && reserved == 0;
  ok = ok && r.get(rep.skipped_calls) && r.get(rep.last_skipped_step) && r.get(rep.last_skipped_tensor) &&
       r.get(rep.non_finite_values);
  require(ok, errc::malformed_message, "feedback checkpoint: truncated header or non-zero reserved bytes");
  require(zero16 == 0, errc::malformed_message, "feedback checkpoint: reserved header field is {}, not 0", zero16);
  require(kind == kind_, errc::size_mismatch, "feedback checkpoint: saved by feedback kind {}, this state is kind {}",
          kind, kind_);
  require(prec == static_cast<std::uint8_t>(precision_) && bufs == buffers_, errc::size_mismatch,
          "feedback checkpoint: {} buffers of precision {} saved, this state has {} of {}", bufs, prec, buffers_,
          to_string(precision_));
  require(shape <= 1, errc::malformed_message, "feedback checkpoint: unknown warm-up shape {}", shape);
  w.shape = static_cast<ramp_shape>(shape);
  require(count == tensors_.size(), errc::size_mismatch, "feedback checkpoint: {} tensors saved, this state has {}",
          count, tensors_.size());
  std::size_t const es = precision_ == element_type::f32 ? 4 : 2;
  std::vector<std::span<std::byte const>> payload(tensors_.size() * buffers_);
  for (std::size_t t = 0; t < tensors_.size(); ++t) {
    std::uint64_t extent = 0;
    std::uint32_t name_len = 0, zero = 0;
    std::span<std::byte const> name;
    require(r.get(extent) && r.get(name_len) && r.get(zero) && r.take(name_len, name), errc::malformed_message,
            "feedback checkpoint: truncated at tensor #{}", t);
    require(zero == 0, errc::malformed_message, "feedback checkpoint: reserved field of tensor #{} is {}, not 0", t,
            zero);
    std::string_view const saved_name(reinterpret_cast<char const*>(name.data()), name.size());
    require(extent == tensors_[t].extent && saved_name == tensors_[t].name, errc::size_mismatch,
            "feedback checkpoint: tensor #{} is '{}' with {} elements, this state has '{}' with {}", t, saved_name,
            extent, tensors_[t].name, tensors_[t].extent);
    for (std::size_t b = 0; b < buffers_; ++b)
      require(r.take(static_cast<std::size_t>(extent) * es, payload[t * buffers_ + b]), errc::malformed_message,
              "feedback checkpoint: truncated buffer {} of tensor '{}'", b, tensors_[t].name);
  }
  require(r.left() == 0, errc::malformed_message, "feedback checkpoint: {} trailing bytes", r.left());
  try {
    w.validate();
  } catch (error const& e) {
    throw_error(errc::malformed_message, "feedback checkpoint: saved warm-up schedule is invalid: {}", e.what());
  }
  require(rep.skipped_calls != 0 || (rep.last_skipped_step == feedback_report::no_step && rep.last_skipped_tensor == 0),
          errc::malformed_message, "feedback checkpoint: no skipped call counted, yet a last skip at step {} is saved",
          rep.last_skipped_step);
  require(rep.skipped_calls == 0 || rep.last_skipped_tensor < tensors_.size(), errc::malformed_message,
          "feedback checkpoint: last skipped tensor {} is outside the {} tensors", rep.last_skipped_tensor,
          tensors_.size());
  // A buffer is never left non-finite (a non-finite value is refused, skipped or reset to 0
  // where it appears), so a NaN or Inf in one is damage.
  for (std::size_t t = 0; t < tensors_.size(); ++t)
    for (std::size_t b = 0; b < buffers_; ++b) {
      auto const src = payload[t * buffers_ + b];
      std::size_t const n = src.size() / es;
      for (std::size_t i = 0; i < n; ++i) {
        float v;
        if (es == 4) {
          std::memcpy(&v, src.data() + 4 * i, 4);
        } else {
          std::uint16_t h;
          std::memcpy(&h, src.data() + 2 * i, 2);
          v = std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
        }
        require(std::isfinite(v), errc::malformed_message,
                "feedback checkpoint: buffer {} of tensor '{}' holds {} at element {}; no step leaves a non-finite "
                "value in a buffer",
                b, tensors_[t].name, v, i);
      }
    }
  // Everything checked: commit.
  for (std::size_t t = 0; t < tensors_.size(); ++t)
    for (std::size_t b = 0; b < buffers_; ++b) {
      auto const src = payload[t * buffers_ + b];
      if (src.empty()) continue;
      if (precision_ == element_type::f32)
        std::memcpy(tensors_[t].f32[b].data(), src.data(), src.size());
      else
        std::memcpy(tensors_[t].bf16[b].data(), src.data(), src.size());
    }
  warmup_ = w;
  report_ = rep;
}

}  // namespace sluice
