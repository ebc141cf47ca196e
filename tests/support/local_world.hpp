// Runs one function per rank of a local_transport world on its own thread and collects what each
// rank threw, so tests can assert on every rank's outcome.
#pragma once

#include <exception>
#include <thread>
#include <vector>

#include <sluice/transport/local.hpp>

namespace sluice::test {

/// Calls f(endpoint) for every rank of a fresh world of `n`; returns each rank's exception (or null).
template <class F>
std::vector<std::exception_ptr> run_local(int n, F&& f) {
  auto eps = local_transport::create(n);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        f(eps[static_cast<std::size_t>(r)]);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  return errors;
}

/// Rethrows the first rank's exception, if any.
inline void rethrow_first(std::vector<std::exception_ptr> const& errors) {
  for (auto const& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace sluice::test
