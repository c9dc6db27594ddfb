# cmake --install: the libraries, the troupe tool, the headers and an exported package, so
# that a job outside this tree builds with
#   find_package(Troupe REQUIRED)
#   target_link_libraries(my_job PRIVATE Troupe::api)
include(CMakePackageConfigHelpers)

set(_troupe_targets troupe_flags troupe_core troupe_graph troupe_keras troupe_keras_model
                    troupe_net troupe_actors troupe_api)
if(TARGET troupe_gpu)
  list(APPEND _troupe_targets troupe_gpu troupe_gpu_kernels)
endif()
foreach(t ${_troupe_targets})
  string(REPLACE "troupe_" "" _name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${_name})  # Troupe::api, Troupe::core...
endforeach()
install(TARGETS ${_troupe_targets} EXPORT TroupeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${TROUPE_INSTALL_INCLUDEDIR})
install(TARGETS troupe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET troupe_gpu_module)
  # Loaded by path when a program asks for a CUDA device (gpu/module.hpp).
  install(TARGETS troupe_gpu_module LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

# The public headers (troupe/) include the runtime's own (core/, net/, actors/): all of
# them go under one directory, laid out as in the source tree.
install(DIRECTORY include/troupe DESTINATION ${TROUPE_INSTALL_INCLUDEDIR})
foreach(dir core net actors)
  install(DIRECTORY ${dir} DESTINATION ${TROUPE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
endforeach()
if(TARGET troupe_gpu)
  install(DIRECTORY gpu DESTINATION ${TROUPE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
endif()

set(TROUPE_CONFIG_WITH_CUDA ${TROUPE_WITH_CUDA})
set(TROUPE_CONFIG_WITH_DNNL ${TROUPE_WITH_DNNL})
set(TROUPE_CONFIG_NCCL_LIBRARY "${TROUPE_NCCL_LIBRARY}")
install(EXPORT TroupeTargets NAMESPACE Troupe:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Troupe)
configure_package_config_file(cmake/TroupeConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/TroupeConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Troupe
                              PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/TroupeConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/TroupeConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/TroupeConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Troupe)
