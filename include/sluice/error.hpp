// Umbrella for sluice::error, sluice::errc and sluice::error_category().
#pragma once
#include <sluice/core/error.hpp>
