// sluice::error and sluice::errc: the one exception type every host-side component throws.
// A std::system_error, so callers can test `e.code() == sluice::errc::timeout` portably.
#pragma once

#include <concepts>
#include <ostream>  // makes <system_error>'s operator<< for error codes usable (as before, when fmt/format.h brought it)
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include <fmt/core.h>

#include <sluice/config.hpp>
#include <sluice/core/detail/fmt_instances.hpp>

namespace sluice {

/// Why an operation failed. Values are stable: they may appear in logs and on the wire.
enum class errc : int {
  invalid_argument = 1,  ///< a policy value or argument outside its documented range
  size_mismatch,         ///< spans, layouts or buffers whose sizes disagree
  malformed_message,     ///< a peer's bytes failed validation (never trusted)
  timeout,               ///< a deadline passed before the operation completed
  peer_lost,             ///< a peer closed, crashed or was declared dead
  non_finite,            ///< NaN or Inf where the chosen policy forbids it
  unsupported,           ///< a valid request this build or configuration cannot serve
};

namespace detail {
class error_category_impl final : public std::error_category {
 public:
  [[nodiscard]] char const* name() const noexcept override { return "sluice"; }
  [[nodiscard]] std::string message(int ev) const override;
};
}  // namespace detail

/// The category of every sluice::errc; one instance per program.
SLUICE_DECL std::error_category const& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

/// The exception thrown by host code. what() reads "<context>: <errc message>".
class error : public std::system_error {
 public:
  error(errc e, std::string const& what);
  [[nodiscard]] errc kind() const noexcept { return static_cast<errc>(code().value()); }
};

namespace detail {
#if defined(SLUICE_CHECK_MESSAGES)
template <class... Args>
using message_format = fmt::format_string<Args...>;
#else
/// The format string of an error message. sluice's own build (tests, benchmarks, examples: where
/// every message is compiled) defines SLUICE_CHECK_MESSAGES, and each format string is then checked
/// against its arguments at compile time, as fmt::format_string does; a trainer's translation
/// units take it as it is and skip that check (6 % of what parsing the umbrella allocates).
template <class... Args>
struct message_format {
  template <class S>
  requires std::convertible_to<S const&, fmt::string_view>
  constexpr message_format(S const& s) : str(s) {}  // NOLINT: implicit, as fmt::format_string
  fmt::string_view str;
};
#endif
}  // namespace detail

/// Throws sluice::error with a fmt-formatted message. Kept out of line of hot loops by [[noreturn]].
template <class... Args>
[[noreturn]] void throw_error(errc e, detail::message_format<std::type_identity_t<Args>...> f, Args&&... args) {
#if defined(SLUICE_CHECK_MESSAGES)
  throw error(e, fmt::format(f, std::forward<Args>(args)...));
#else
  throw error(e, fmt::vformat(f.str, fmt::make_format_args(args...)));
#endif
}

/// Throws `e` with the message when `cond` is false; the message is formatted only on failure, but
/// the arguments are evaluated always: never pass one that is only valid when `cond` fails (such
/// as `v[j - 1]` guarded by `j > 0`); write `if (...) throw_error(...)` there instead.
template <class... Args>
void require(bool cond, errc e, detail::message_format<std::type_identity_t<Args>...> f, Args&&... args) {
  if (!cond) [[unlikely]]
    throw_error(e, f, std::forward<Args>(args)...);
}

}  // namespace sluice

template <>
struct std::is_error_code_enum<sluice::errc> : std::true_type {};

#if SLUICE_HEADER_ONLY
#include <sluice/core/impl/error.ipp>
#endif
