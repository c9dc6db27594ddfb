# Compiler flags shared by every Troupe target, through the interface target troupe_flags.
option(TROUPE_FUZZ "Build the libFuzzer targets of tests/fuzz (needs clang)" OFF)
add_library(troupe_flags INTERFACE)
# Warnings are the project's own; an installed Troupe does not impose them on its users.
target_compile_options(troupe_flags INTERFACE $<BUILD_INTERFACE:-Wall -Wextra -Wno-unused-parameter>)
if(TROUPE_NATIVE)
  # The training kernels (Eigen GEMM, element-wise loops) need AVX2/FMA to be fast.
  target_compile_options(troupe_flags INTERFACE -march=native)
  # GCC 12 reports false "may be used uninitialized" inside its own AVX-512 intrinsics
  # headers when Eigen uses them.
  target_compile_options(troupe_flags INTERFACE
                         $<BUILD_INTERFACE:$<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>>)
endif()
if(TROUPE_SANITIZE)
  if(NOT TROUPE_SANITIZE MATCHES "^(address|undefined|thread)(,(address|undefined))*$")
    message(FATAL_ERROR "TROUPE_SANITIZE must be address, undefined, thread or a list "
                        "such as address,undefined")
  endif()
  # Any report fails the run: a sanitizer build that only prints is not a check.
  target_compile_options(troupe_flags INTERFACE -fsanitize=${TROUPE_SANITIZE}
                         -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(troupe_flags INTERFACE -fsanitize=${TROUPE_SANITIZE})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    target_compile_options(troupe_flags INTERFACE
      $<BUILD_INTERFACE:-fsanitize-ignorelist=${PROJECT_SOURCE_DIR}/cmake/sanitize-ignorelist.txt>)
  endif()
endif()
if(TROUPE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "TROUPE_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # Coverage for libFuzzer in everything the targets reach; the targets link the fuzzer.
  target_compile_options(troupe_flags INTERFACE -fsanitize=fuzzer-no-link)
endif()
