// Core concepts: Element (the value types sluice computes on) and SparseIndex (index widths).
#pragma once

#include <sluice/core/element.hpp>
#include <sluice/core/sparse.hpp>
