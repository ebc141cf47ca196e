// The assembled pipeline: policy values in, updated parameters out; telemetry sinks beside it;
// the solver's controller bound to it.
#pragma once

#include <sluice/pipeline/adaptive.hpp>
#include <sluice/pipeline/concepts.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/pipeline/telemetry.hpp>
