#pragma once

// The public name of core/runtime/coordinator_types.hpp (the ClusterCoordinator's options, stats
// and watchdog report). The runtime's types live below actors/, which uses them; a job includes
// them from here.
#include "core/runtime/coordinator_types.hpp"
