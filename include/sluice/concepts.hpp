// Umbrella for every concept sluice defines, one folder each.
#pragma once

#include <sluice/bucket/concepts.hpp>
#include <sluice/collective/concepts.hpp>
#include <sluice/compress/concepts.hpp>
#include <sluice/core/concepts.hpp>
#include <sluice/cuda/status.hpp>
#include <sluice/feedback/concepts.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/pipeline/concepts.hpp>
#include <sluice/solver/concepts.hpp>
#include <sluice/transport/concepts.hpp>
