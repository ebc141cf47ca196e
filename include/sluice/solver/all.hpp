// Everything in solver/: cost model, statistical efficiency, solver, bandwidth monitor, controller
// and trace replay.
#pragma once

#include <sluice/solver/concepts.hpp>
#include <sluice/solver/controller.hpp>
#include <sluice/solver/cost_model.hpp>
#include <sluice/solver/efficiency.hpp>
#include <sluice/solver/layer_bits.hpp>
#include <sluice/solver/monitor.hpp>
#include <sluice/solver/replay.hpp>
#include <sluice/solver/solve.hpp>
