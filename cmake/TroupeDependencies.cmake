# Every dependency comes from Debian's packages (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)        # Eigen3::Eigen
find_package(ZLIB REQUIRED)                        # gzip'ed IDX files
find_package(fmt REQUIRED)                         # fmt::fmt
find_package(nlohmann_json 3 REQUIRED)             # nlohmann_json::nlohmann_json
find_package(CLI11 REQUIRED)                       # CLI11::CLI11
find_package(msgpack REQUIRED CONFIG)              # msgpackc-cxx (4.x)
find_package(OpenSSL 3 REQUIRED)                   # TLS 1.3 on the job's links (TROUPE_TLS)
if(TROUPE_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)                  # Catch2::Catch2
  include(Catch)
endif()

# CAF 0.17.6 (Debian) ships no CMake config and no .pc file: imported targets by hand.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(CAF::core UNKNOWN IMPORTED)
set_target_properties(CAF::core PROPERTIES
  IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES Threads::Threads)
add_library(CAF::io UNKNOWN IMPORTED)
set_target_properties(CAF::io PROPERTIES
  IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
  INTERFACE_LINK_LIBRARIES CAF::core)

# Keras .keras files (core/keras): libzip reads and writes the zip, HDF5's C library the
# weights inside it. Through pkg-config: Debian's libzip CMake config names zipcmp and
# friends, which libzip-dev does not install; FindHDF5 links static libpthread/libdl.
find_package(PkgConfig REQUIRED)
pkg_check_modules(TROUPE_LIBZIP REQUIRED IMPORTED_TARGET libzip)  # PkgConfig::TROUPE_LIBZIP
pkg_check_modules(TROUPE_HDF5 REQUIRED IMPORTED_TARGET hdf5)      # PkgConfig::TROUPE_HDF5 (serial)
