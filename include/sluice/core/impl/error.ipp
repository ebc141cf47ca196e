// The bodies of sluice/core/error.hpp: header-only, included at its end; with sluice::kernels,
// compiled there once.
#pragma once

#include <sluice/core/error.hpp>

namespace sluice {

SLUICE_DECL std::string detail::error_category_impl::message(int ev) const {
  switch (static_cast<errc>(ev)) {
    case errc::invalid_argument:
      return "invalid argument";
    case errc::size_mismatch:
      return "size mismatch";
    case errc::malformed_message:
      return "malformed message";
    case errc::timeout:
      return "timeout";
    case errc::peer_lost:
      return "peer lost";
    case errc::non_finite:
      return "non-finite value";
    case errc::unsupported:
      return "unsupported";
  }
  return "unknown sluice error";
}

SLUICE_DECL std::error_category const& error_category() noexcept {
  static detail::error_category_impl const instance;
  return instance;
}

SLUICE_DECL error::error(errc e, std::string const& what) : std::system_error(make_error_code(e), what) {}

}  // namespace sluice
