#pragma once

// The public name of core/runtime/codec.hpp (how step arguments and results are encoded (msgpack)).
// The runtime's types live below actors/, which uses them; a job includes them from here.
#include "core/runtime/codec.hpp"
