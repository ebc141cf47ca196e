// Umbrella for sluice/optim: the Optimizer concept, its state, sgd, adam, adamw, sluice::step /
// sluice::flush and step_all.
#pragma once

#include <sluice/optim/adam.hpp>
#include <sluice/optim/adamw.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/group.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/optim/step.hpp>
