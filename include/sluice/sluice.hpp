// Umbrella header for sluice::sluice: everything that needs no optional engine.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/config.hpp>
#include <sluice/error.hpp>
#include <sluice/version.hpp>

#include <sluice/core/cache.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/core/varint.hpp>
#include <sluice/core/wire.hpp>
