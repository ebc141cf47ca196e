// Where and how eagerly the pipeline's stage threads run (pipeline_options::scheduling): the
// check of the values at construction, and each stage thread setting its own nice value and
// cores as it starts (Linux; elsewhere nothing). Used by the scheduler, detail/stages.hpp.
#pragma once

#include <algorithm>
#include <cerrno>

#include <sluice/config.hpp>
#include <sluice/core/error.hpp>
#include <sluice/pipeline/concepts.hpp>
#include <sluice/pipeline/options.hpp>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace sluice::detail::pipeline {

/// The scheduling values a pipeline accepts: nice increments in [0, 19] (lowering a thread never
/// needs a privilege) and cores this process may run on.
SLUICE_DECL void check_scheduling(stage_scheduling const& s);

/// Sets the calling stage thread's nice value and cores (Linux: both are per thread).
SLUICE_DECL void apply_scheduling(stage_scheduling const& s, stage_thread t);

}  // namespace sluice::detail::pipeline

#if SLUICE_HEADER_ONLY
#include <sluice/pipeline/impl/scheduling.ipp>
#endif
