# What `cmake --install build --prefix DIR` (and `cpack -G DEB`) installs, with the
# GNUInstallDirs layout:
#   lib/                 libreplayalloc.so, libreplayalloc.a, libreplayalloc_preload.so,
#                        libreplayalloc_torch.so and libreplayalloc_cuda.so (when built)
#   lib/cmake/replayalloc/   the CMake package: find_package(replayalloc CONFIG) gives
#                        replayalloc::replayalloc (shared), replayalloc::replayalloc_static,
#                        replayalloc::torch and replayalloc::cuda (when built)
#   lib/pkgconfig/replayalloc.pc
#   lib/python3/dist-packages/replayalloc/   the Python package (Debian's python3 layout)
#   include/replayalloc/ the public headers;  bin/replayalloc   the command-line tool
# Included from the top-level CMakeLists.txt after every target is defined. Nothing
# here changes how the build tree builds: the exported interfaces below differ from the
# build tree's only inside $<INSTALL_INTERFACE:...>.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(REPLAYALLOC_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/replayalloc" CACHE STRING
    "Where the CMake package files go, relative to the install prefix")
set(REPLAYALLOC_INSTALL_PYTHONDIR "lib/python3/dist-packages" CACHE STRING
    "Where the Python package goes, relative to the install prefix (Debian's python3 looks in <prefix>/lib/python3/dist-packages)")

# replayalloc_build_only(TARGET PROPERTY...): each entry of the interface PROPERTY that
# is not already a $<BUILD_INTERFACE:>/$<INSTALL_INTERFACE:> becomes build-only, so the
# exported target does not carry source-tree paths or link dependencies its users do
# not need (a shared library's own dependencies are its DT_NEEDED entries).
function(replayalloc_build_only target)
  foreach(property IN LISTS ARGN)
    get_target_property(values ${target} ${property})
    if(NOT values)
      continue()
    endif()
    set(wrapped)
    foreach(v IN LISTS values)
      if(v MATCHES "^\\$<(BUILD|INSTALL)_INTERFACE:")
        list(APPEND wrapped "${v}")
      else()
        list(APPEND wrapped "$<BUILD_INTERFACE:${v}>")
      endif()
    endforeach()
    set_property(TARGET ${target} PROPERTY ${property} "${wrapped}")
  endforeach()
endfunction()

# ---- Libraries and the CMake package
# The shared libraries: users need the headers and the library, nothing else.
set(shared_targets replayalloc_shared)
set_target_properties(replayalloc_shared PROPERTIES EXPORT_NAME replayalloc)
if(TARGET replayalloc_torch_shared)
  list(APPEND shared_targets replayalloc_torch_shared)
  set_target_properties(replayalloc_torch_shared PROPERTIES EXPORT_NAME torch)
endif()
if(TARGET replayalloc_cuda_shared)
  list(APPEND shared_targets replayalloc_cuda_shared)
  set_target_properties(replayalloc_cuda_shared PROPERTIES EXPORT_NAME cuda)
endif()
foreach(t IN LISTS shared_targets)
  replayalloc_build_only(${t} INTERFACE_INCLUDE_DIRECTORIES INTERFACE_LINK_LIBRARIES
    INTERFACE_COMPILE_DEFINITIONS INTERFACE_LINK_OPTIONS)
endforeach()
# Installed binaries keep the run path to libraries outside the system's directories
# (the CUDA runtime under /usr/local/cuda) that the build tree's run path had.
set_target_properties(${shared_targets} replayalloc_preload replayalloc_cli PROPERTIES
  INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS ${shared_targets} EXPORT replayalloc-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT replayalloc-targets NAMESPACE replayalloc::
  DESTINATION ${REPLAYALLOC_INSTALL_CMAKEDIR} FILE replayalloc-targets.cmake)

# The static library: its users link jemalloc, Abseil and Threads too, which the
# package's config file finds (replayalloc-config.cmake.in). It carries no compile
# definitions: those of the core (REPLAYALLOC_DEBUG, REPLAYALLOC_VERSION_STRING) are
# for its own sources, on replayalloc_internal (allocator/CMakeLists.txt).
set_target_properties(replayalloc PROPERTIES EXPORT_NAME replayalloc_static)
install(TARGETS replayalloc EXPORT replayalloc-static-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT replayalloc-static-targets NAMESPACE replayalloc::
  DESTINATION ${REPLAYALLOC_INSTALL_CMAKEDIR} FILE replayalloc-static-targets.cmake)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/replayalloc-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/replayalloc-config.cmake
  INSTALL_DESTINATION ${REPLAYALLOC_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/replayalloc-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/replayalloc-config.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/replayalloc-config-version.cmake
  DESTINATION ${REPLAYALLOC_INSTALL_CMAKEDIR})

# The LD_PRELOAD library and the command-line tool (not part of the CMake package).
install(TARGETS replayalloc_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS replayalloc_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# ---- Public headers: the C and C++ API, and the integrations' C APIs when built.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/allocator/include/replayalloc
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/replayalloc/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayalloc)
if(TARGET replayalloc_torch_shared)
  install(FILES ${PROJECT_SOURCE_DIR}/integrations/pytorch/cpu/include/replayalloc/torch.hpp
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayalloc)
endif()
if(TARGET replayalloc_cuda_shared)
  install(FILES ${PROJECT_SOURCE_DIR}/integrations/cuda/include/replayalloc/cuda.h
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayalloc)
endif()

# ---- pkg-config: the shared library. The prefix is found from the .pc file's own
# place, so a tree installed with `cmake --install --prefix DIR` (or packaged) works
# wherever it lands.
file(RELATIVE_PATH REPLAYALLOC_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" REPLAYALLOC_PC_TO_PREFIX "${REPLAYALLOC_PC_TO_PREFIX}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(REPLAYALLOC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(REPLAYALLOC_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(REPLAYALLOC_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  set(REPLAYALLOC_PC_PREFIX "\${pcfiledir}/${REPLAYALLOC_PC_TO_PREFIX}")
  set(REPLAYALLOC_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(REPLAYALLOC_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# Requires.private: Abseil's pkg-config modules of the libraries the core links
# (absl::status -> absl_status).
list(REMOVE_ITEM REPLAYALLOC_ABSL_LIBS absl::symbolize)
list(TRANSFORM REPLAYALLOC_ABSL_LIBS REPLACE "^absl::" "absl_" OUTPUT_VARIABLE pc_absl)
list(JOIN pc_absl " " REPLAYALLOC_PC_ABSL)
configure_file(${CMAKE_CURRENT_LIST_DIR}/replayalloc.pc.in
  ${CMAKE_CURRENT_BINARY_DIR}/replayalloc.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/replayalloc.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- The Python package (finds the libraries relative to itself, see __init__.py).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/integrations/pytorch/python/replayalloc
  DESTINATION ${REPLAYALLOC_INSTALL_PYTHONDIR}
  FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
# replayalloc.__version__, from project(VERSION) (the source tree's package reads it
# from CMakeLists.txt itself).
file(WRITE ${PROJECT_BINARY_DIR}/python/replayalloc/_version.py
  "__version__ = \"${PROJECT_VERSION}\"\n")
install(FILES ${PROJECT_BINARY_DIR}/python/replayalloc/_version.py
  DESTINATION ${REPLAYALLOC_INSTALL_PYTHONDIR}/replayalloc)

# ---- Debian package: `cpack -G DEB` in the build folder. Dependencies are named for
# Debian 12; libcudart (when the CUDA parts are built) comes from the CUDA toolkit,
# not from a Debian package, so it is not listed.
set(CPACK_PACKAGE_NAME replayalloc)
set(CPACK_PACKAGE_VENDOR "replayalloc")
set(CPACK_PACKAGE_CONTACT "replayalloc maintainers <maintainers@users.noreply.a-seed-8aaad03c.example>"
    CACHE STRING "Maintainer of the Debian package")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Record-plan-replay memory allocator for deep-learning inference")
set(CPACK_PACKAGE_DESCRIPTION
    "replayalloc records one iteration of a repetitive program, plans its allocations into one slab and replays later iterations from it. The package has the C/C++ library, the LD_PRELOAD library, the replayalloc tool, the CMake and pkg-config files and the Python package.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(deb_depends "libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1, libjemalloc2, libabsl20220623")
set(deb_recommends "python3")
if(TARGET replayalloc_torch_shared)
  # Debian's runtime package of libtorch is named after its version (libtorch1.13).
  set(REPLAYALLOC_DEB_TORCH_PACKAGE "libtorch${Torch_VERSION_MAJOR}.${Torch_VERSION_MINOR}"
      CACHE STRING "The Debian package with the libtorch the torch library was built against")
  string(APPEND deb_depends ", ${REPLAYALLOC_DEB_TORCH_PACKAGE}")
  string(APPEND deb_recommends ", python3-torch")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${deb_depends}")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "${deb_recommends}")
# The static library and the CMake files need the development packages.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libjemalloc-dev, libabsl-dev, pkg-config, cmake")
