// The assembled pipeline: policy values in, updated parameters out; telemetry sinks beside it.
#pragma once

#include <sluice/pipeline/concepts.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/pipeline/telemetry.hpp>
