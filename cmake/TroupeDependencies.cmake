# Every dependency comes from Debian's packages (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)        # Eigen3::Eigen
find_package(ZLIB REQUIRED)                        # gzip'ed IDX files
find_package(fmt REQUIRED)                         # fmt::fmt
find_package(nlohmann_json 3 REQUIRED)             # nlohmann_json::nlohmann_json
find_package(CLI11 REQUIRED)                       # CLI11::CLI11
if(TROUPE_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)                  # Catch2::Catch2
  include(Catch)
endif()
