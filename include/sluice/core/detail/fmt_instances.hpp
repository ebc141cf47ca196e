// fmt 9's formatting engine, compiled once in libfmt instead of in every translation unit.
// fmt::format_to(ctx.out(), ...) - what every sluice formatter calls - reaches
// fmt::detail::vformat_to<char>, a template that <fmt/format.h> defines, so each translation unit
// that includes format.h stamps it again with all it calls (float and integer writers, Dragon4,
// escapes): about 90 KB of code and a fifth of a pipeline unit's code generation. libfmt holds
// the explicit instantiation (src/format.cc), so declaring it here keeps the body out. Only for
// g++ against a compiled fmt 9: clang mangles the specialization's parameter types differently
// from the g++ that built Debian's libfmt, nvcc's units are left as they were, and a header-only
// fmt (FMT_HEADER_ONLY) has no library to link.
#pragma once

#include <fmt/core.h>

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && !defined(FMT_HEADER_ONLY) && \
    FMT_VERSION >= 90000 && FMT_VERSION < 100000 && !defined(SLUICE_NO_FMT_EXTERN)
FMT_BEGIN_NAMESPACE
namespace detail {
extern template void vformat_to<char>(buffer<char>&, basic_string_view<char>,
                                      basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);
}  // namespace detail
FMT_END_NAMESPACE
#endif
