// Umbrella for every concept sluice defines, one folder each.
#pragma once

#include <sluice/compress/concepts.hpp>
#include <sluice/core/concepts.hpp>
