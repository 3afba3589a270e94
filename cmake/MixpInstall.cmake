# `cmake --install` puts libmixp, the public headers, the CLI and a CMake package config in the
# prefix, so another project can `find_package(mixp CONFIG)` and link `mixp::mixp`
# (tests/install/ proves it). All third-party libraries are private to libmixp.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS mixp EXPORT mixpTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET mixp_cli)
  install(TARGETS mixp_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY include/mixp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mixpTargets NAMESPACE mixp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mixp)
configure_package_config_file(cmake/mixpConfig.cmake.in ${PROJECT_BINARY_DIR}/mixpConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mixp)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mixpConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mixpConfig.cmake ${PROJECT_BINARY_DIR}/mixpConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mixp)
