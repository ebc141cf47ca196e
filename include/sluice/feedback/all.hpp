// Everything in feedback/: the concept, state, warm-up and the four feedback policies.
#pragma once

#include <sluice/feedback/concepts.hpp>
#include <sluice/feedback/ef21.hpp>
#include <sluice/feedback/momentum_correction.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/non_finite.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/feedback/state.hpp>
#include <sluice/feedback/warmup.hpp>
#include <sluice/feedback/workspace.hpp>
