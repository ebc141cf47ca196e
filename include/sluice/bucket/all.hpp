// Everything in bucket/: layouts, fingerprints and bucket plans.
#pragma once

#include <sluice/bucket/concepts.hpp>
#include <sluice/bucket/layout.hpp>
#include <sluice/bucket/plan.hpp>
