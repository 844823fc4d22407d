# `cmake --install`: headers, static libraries, the actorpipe binary and a CMake package, so
# a program outside this tree can
#   find_package(actorpipe REQUIRED)
#   target_link_libraries(my_program PRIVATE actorpipe::actorpipe)
# and bring its own model (register_model), schedule or policy. See examples/byo_model.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(actorpipe_install_targets actorpipe_log actorpipe_core actorpipe_model actorpipe_transport actorpipe_ucx
    actorpipe_ucx_transport actorpipe_transport_factory actorpipe_actors actorpipe_cli)
if(TARGET actorpipe_nccl)
  list(APPEND actorpipe_install_targets actorpipe_nccl)
endif()
set(ACTORPIPE_PACKAGE_TORCH_DIR "${ACTORPIPE_TORCH_DIR}")  # a PyPI wheel's LibTorch: found there again
install(TARGETS ${actorpipe_install_targets} EXPORT actorpipeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS actorpipe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Headers keep their source paths under include/actorpipe ("core/model/layer_model.hpp"),
# which is how they include each other; actorpipe/actorpipe.hpp includes the public API.
foreach(dir core actors transport apps)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorpipe/${dir}
          FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/actorpipe/actorpipe.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorpipe/actorpipe)
install(EXPORT actorpipeTargets NAMESPACE actorpipe:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/actorpipe)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/actorpipeConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/actorpipeConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/actorpipe)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/actorpipeConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/actorpipeConfig.cmake ${PROJECT_BINARY_DIR}/actorpipeConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/actorpipe)
