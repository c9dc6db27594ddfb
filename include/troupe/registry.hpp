#pragma once

// The public name of core/runtime/registry.hpp (steps and dataset functions by name). The runtime's
// types live below actors/, which uses them; a job includes them from here.
#include "core/runtime/registry.hpp"
