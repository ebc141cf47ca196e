// The engine-free transports: the concept, the in-process world, fault injection and sub-groups.
#pragma once

#include <sluice/transport/concepts.hpp>
#include <sluice/transport/fault.hpp>
#include <sluice/transport/group.hpp>
#include <sluice/transport/local.hpp>
