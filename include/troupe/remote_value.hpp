#pragma once

// The public name of core/runtime/remote_value.hpp (the result of a scheduled closure). The
// runtime's types live below actors/, which uses them; a job includes them from here.
#include "core/runtime/remote_value.hpp"
