#pragma once

// TROUPE_HD marks a function that compiles for the host and, under nvcc, for a CUDA device
// too: the element-wise arithmetic both backends share (half-precision conversions, the
// optimizers' per-element updates) is written once. No CUDA header is needed for it.
#if defined(__CUDACC__)
#define TROUPE_HD __host__ __device__
#else
#define TROUPE_HD
#endif
