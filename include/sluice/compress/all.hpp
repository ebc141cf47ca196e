// Every codec of sluice::compress, for users who want the whole catalogue in one include.
#pragma once

#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/cast.hpp>
#include <sluice/compress/concepts.hpp>
#include <sluice/compress/context.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/power_sgd.hpp>
#include <sluice/compress/qsgd.hpp>
#include <sluice/compress/random_k.hpp>
#include <sluice/compress/rounding.hpp>
#include <sluice/compress/sign.hpp>
#include <sluice/compress/threshold_top_k.hpp>
#include <sluice/compress/top_k.hpp>
