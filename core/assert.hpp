#pragma once

#include <cstdio>
#include <cstdlib>

/// Invariant check: a broken invariant is a bug, never a recoverable error. Prints the
/// condition, the message and file:line, then aborts. Recoverable errors are values
/// (see core/expected.hpp).
#define TROUPE_ASSERT(cond, msg)                                                                  \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "%s:%d: invariant broken: %s (%s)\n", __FILE__, __LINE__, #cond, msg); \
      std::abort();                                                                               \
    }                                                                                             \
  } while (false)
