// The bodies of sluice/pipeline/detail/scheduling.hpp: header-only, included at its end; with sluice::kernels, compiled
// there once.
#pragma once

#include <sluice/pipeline/detail/scheduling.hpp>

namespace sluice::detail::pipeline {

SLUICE_DECL void check_scheduling(stage_scheduling const& s) {
  for (int n : {s.nice, s.exchange_nice})
    require(n >= 0 && n <= 19, errc::invalid_argument,
            "pipeline_options.scheduling: a nice increment of {}; use 0 (the trainer's priority) to 19 (the lowest)",
            n);
#if defined(__linux__)
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  bool const known = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0;
  for (int c : s.cpus)
    require(c >= 0 && c < CPU_SETSIZE && (!known || CPU_ISSET(c, &allowed)), errc::invalid_argument,
            "pipeline_options.scheduling.cpus: core {} is not one this process may run on", c);
#endif
}

SLUICE_DECL void apply_scheduling(stage_scheduling const& s, stage_thread t) {
#if defined(__linux__)
  int const increment = t == stage_thread::exchange ? s.exchange_nice : s.nice;
  if (increment > 0) {
    auto const tid = static_cast<id_t>(::gettid());
    errno = 0;
    int const now = ::getpriority(PRIO_PROCESS, tid);
    require(errno == 0 && ::setpriority(PRIO_PROCESS, tid, std::min(now + increment, 19)) == 0, errc::unsupported,
            "pipeline: cannot lower the {} thread's priority by {}", t == stage_thread::exchange ? "exchange" : "stage",
            increment);
  }
  if (!s.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : s.cpus) CPU_SET(c, &set);
    require(::pthread_setaffinity_np(::pthread_self(), sizeof set, &set) == 0, errc::invalid_argument,
            "pipeline: cannot pin the stage threads to the cores pipeline_options.scheduling.cpus names");
  }
#else
  (void)s;
  (void)t;
#endif
}

}  // namespace sluice::detail::pipeline
