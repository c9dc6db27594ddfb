#pragma once

// The public name of core/runtime/step_context.hpp (what a step sees of its worker: variables, PS
// calls, cancellation). The runtime's types live below actors/, which uses them; a job includes
// them from here.
#include "core/runtime/step_context.hpp"
