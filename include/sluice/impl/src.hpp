// Every function body that sluice::kernels compiles once (see SLUICE_DECL in <sluice/config.hpp>):
// the one translation unit of sluice::kernels that includes this header, compiled with
// SLUICE_SEPARATE_KERNELS, defines them; a unit of the program that includes sluice with
// SLUICE_SEPARATE_KERNELS only declares them.
#pragma once

#include <sluice/config.hpp>

#if SLUICE_HEADER_ONLY
#error "<sluice/impl/src.hpp> is compiled with SLUICE_SEPARATE_KERNELS, in sluice::kernels only"
#endif

#include <sluice/bucket/impl/layout.ipp>
#include <sluice/bucket/impl/plan.ipp>
#include <sluice/collective/impl/message.ipp>
#include <sluice/core/impl/cache.ipp>
#include <sluice/core/impl/error.ipp>
#include <sluice/core/impl/serial.ipp>
#include <sluice/core/impl/wire.ipp>
#include <sluice/core/impl/wire_checksum.ipp>
#include <sluice/feedback/impl/state.ipp>
#include <sluice/pipeline/impl/agreement.ipp>
#include <sluice/pipeline/impl/checkpoint.ipp>
#include <sluice/pipeline/impl/flat_plan.ipp>
#include <sluice/pipeline/impl/parameters.ipp>
#include <sluice/pipeline/impl/scheduling.ipp>
#include <sluice/pipeline/impl/stages.ipp>
