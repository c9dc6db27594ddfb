# Compiler flags shared by every Troupe target, through the interface target troupe_flags.
add_library(troupe_flags INTERFACE)
target_compile_options(troupe_flags INTERFACE -Wall -Wextra -Wno-unused-parameter)
if(TROUPE_NATIVE)
  # The training kernels (Eigen GEMM, element-wise loops) need AVX2/FMA to be fast.
  target_compile_options(troupe_flags INTERFACE -march=native)
  # GCC 12 reports false "may be used uninitialized" inside its own AVX-512 intrinsics
  # headers when Eigen uses them.
  target_compile_options(troupe_flags INTERFACE -Wno-maybe-uninitialized)
endif()
if(TROUPE_SANITIZE)
  if(NOT TROUPE_SANITIZE MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR "TROUPE_SANITIZE must be address, undefined or thread")
  endif()
  target_compile_options(troupe_flags INTERFACE -fsanitize=${TROUPE_SANITIZE} -fno-omit-frame-pointer)
  target_link_options(troupe_flags INTERFACE -fsanitize=${TROUPE_SANITIZE})
endif()
