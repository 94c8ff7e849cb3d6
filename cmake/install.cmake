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
# Components (one Debian package each, below): lib, dev, preload, python, tools.
install(TARGETS ${shared_targets} EXPORT replayalloc-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib NAMELINK_COMPONENT dev)
install(EXPORT replayalloc-targets NAMESPACE replayalloc::
  DESTINATION ${REPLAYALLOC_INSTALL_CMAKEDIR} FILE replayalloc-targets.cmake COMPONENT dev)

# The static library: its users link jemalloc, Abseil and Threads too, which the
# package's config file finds (replayalloc-config.cmake.in). It carries no compile
# definitions: those of the core (REPLAYALLOC_DEBUG, REPLAYALLOC_VERSION_STRING) are
# for its own sources, on replayalloc_internal (allocator/CMakeLists.txt).
set_target_properties(replayalloc PROPERTIES EXPORT_NAME replayalloc_static)
install(TARGETS replayalloc EXPORT replayalloc-static-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(EXPORT replayalloc-static-targets NAMESPACE replayalloc::
  DESTINATION ${REPLAYALLOC_INSTALL_CMAKEDIR} FILE replayalloc-static-targets.cmake COMPONENT dev)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/replayalloc-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/replayalloc-config.cmake
  INSTALL_DESTINATION ${REPLAYALLOC_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/replayalloc-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/replayalloc-config.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/replayalloc-config-version.cmake
  DESTINATION ${REPLAYALLOC_INSTALL_CMAKEDIR} COMPONENT dev)

# The LD_PRELOAD library and the command-line tool (not part of the CMake package).
install(TARGETS replayalloc_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT preload)
install(TARGETS replayalloc_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)

# ---- Public headers: the C and C++ API, and the integrations' C APIs when built.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/allocator/include/replayalloc
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/replayalloc/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayalloc COMPONENT dev)
if(TARGET replayalloc_torch_shared)
  install(FILES ${PROJECT_SOURCE_DIR}/integrations/pytorch/cpu/include/replayalloc/torch.hpp
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayalloc COMPONENT dev)
endif()
if(TARGET replayalloc_cuda_shared)
  install(FILES ${PROJECT_SOURCE_DIR}/integrations/cuda/include/replayalloc/cuda.h
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayalloc COMPONENT dev)
  # What the Python package compiles against the running torch for the native CUDA
  # route (replayalloc.torch.native_cuda_module): the adapter beside the package, the
  # core's headers with the others (so the route needs the dev component too).
  install(FILES ${PROJECT_SOURCE_DIR}/integrations/cuda/include/replayalloc/cuda.hpp
    ${PROJECT_SOURCE_DIR}/integrations/cuda/include/replayalloc/cuda_native.hpp
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayalloc COMPONENT dev)
  install(FILES ${PROJECT_SOURCE_DIR}/integrations/pytorch/cuda/c10_allocator.cc
    DESTINATION ${REPLAYALLOC_INSTALL_PYTHONDIR}/replayalloc COMPONENT python)
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
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# ---- The Python package (finds the libraries relative to itself, see __init__.py).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/integrations/pytorch/python/replayalloc
  DESTINATION ${REPLAYALLOC_INSTALL_PYTHONDIR} COMPONENT python
  FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
# replayalloc.__version__, from project(VERSION) (the source tree's package reads it
# from CMakeLists.txt itself).
file(WRITE ${PROJECT_BINARY_DIR}/python/replayalloc/_version.py
  "__version__ = \"${PROJECT_VERSION}\"\n")
install(FILES ${PROJECT_BINARY_DIR}/python/replayalloc/_version.py
  DESTINATION ${REPLAYALLOC_INSTALL_PYTHONDIR}/replayalloc COMPONENT python)

# ---- Debian packages: `cpack -G DEB` in the build folder makes five, split as Debian
# splits a library (one per component above):
#   libreplayalloc0      the shared library (SONAME libreplayalloc.so.0) and the
#                        integrations' libraries loaded by path (torch, CUDA)
#   libreplayalloc-dev   headers, the static library, the libreplayalloc.so link, the
#                        CMake package and the pkg-config file
#   replayalloc-preload  the LD_PRELOAD library
#   python3-replayalloc  the Python package
#   replayalloc-tools    the replayalloc command
# Each package's dependencies on other Debian packages are computed by dpkg-shlibdeps
# from the ELF files it holds (CPACK_DEBIAN_PACKAGE_SHLIBDEPS), not listed by hand;
# only those on each other (the same version) and on what no ELF file says (the -dev
# package's users need jemalloc's and Abseil's development files; Python) are named.
# libcudart (when the CUDA parts are built) comes from the CUDA toolkit, not from a
# Debian package, and is not found by dpkg-shlibdeps: the CUDA library's users install
# the toolkit.
# Each package carries what Debian policy asks in /usr/share/doc/PACKAGE: a
# machine-readable copyright file (the license named, its text in Debian's
# common-licenses) and a changelog (gzip -9n, written here).
set(deb_doc "${PROJECT_BINARY_DIR}/debian-doc")
file(WRITE ${deb_doc}/copyright
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: replayalloc
Source: the replayalloc source tree

Files: *
Copyright: 2026 the replayalloc authors
License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the \"License\"); you may not use
 this software except in compliance with the License.
 .
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
")
string(TIMESTAMP deb_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
foreach(pair IN ITEMS lib=libreplayalloc${PROJECT_VERSION_MAJOR} dev=libreplayalloc-dev
                      preload=replayalloc-preload python=python3-replayalloc tools=replayalloc-tools)
  string(REPLACE "=" ";" pair "${pair}")
  list(GET pair 0 component)
  list(GET pair 1 package)
  file(WRITE ${deb_doc}/${package}/changelog
"${package} (${PROJECT_VERSION}) unstable; urgency=medium

  * Built from the replayalloc source tree, version ${PROJECT_VERSION}.

 -- replayalloc maintainers <maintainers@users.noreply.a-seed-8aaad03c.example>  ${deb_date}
")
  execute_process(COMMAND gzip -9nf ${deb_doc}/${package}/changelog RESULT_VARIABLE gz)
  install(FILES ${deb_doc}/copyright DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package}
    COMPONENT ${component})
  if(gz EQUAL 0)
    install(FILES ${deb_doc}/${package}/changelog.gz DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package}
      COMPONENT ${component})
  endif()
endforeach()
# The libraries' packages tell ldconfig through a trigger (not a maintainer script).
file(WRITE ${deb_doc}/triggers "activate-noawait ldconfig\n")
# libcudart is found through the run path /usr/local/cuda/lib (the CUDA toolkit is not a
# Debian package): said to lintian, with the reason, where the CUDA library is built.
if(TARGET replayalloc_cuda_shared)
  file(WRITE ${deb_doc}/lintian/libreplayalloc${PROJECT_VERSION_MAJOR}
"# libcudart comes from the CUDA toolkit under /usr/local/cuda, which no Debian package provides.
libreplayalloc${PROJECT_VERSION_MAJOR}: custom-library-search-path RUNPATH /usr/local/cuda/*
")
  install(FILES ${deb_doc}/lintian/libreplayalloc${PROJECT_VERSION_MAJOR}
    DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides COMPONENT lib)
endif()
set(CPACK_PACKAGE_NAME replayalloc)
set(CPACK_PACKAGE_VENDOR "replayalloc")
set(CPACK_PACKAGE_CONTACT "replayalloc maintainers <maintainers@users.noreply.a-seed-8aaad03c.example>"
    CACHE STRING "Maintainer of the Debian packages")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Record-plan-replay memory allocator for deep-learning inference")
set(CPACK_PACKAGE_DESCRIPTION
    "replayalloc records one iteration of a repetitive program, plans its allocations into one slab and replays later iterations from it.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL lib dev preload python tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)  # debug information stays in the build tree
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # a shlibs file for the library with a SONAME
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${deb_doc}/triggers)
set(CPACK_DEBIAN_PRELOAD_PACKAGE_CONTROL_EXTRA ${deb_doc}/triggers)
# The packages' own libraries, for dpkg-shlibdeps (the tools link libreplayalloc.so.0).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${PROJECT_BINARY_DIR}/allocator")
set(deb_major ${PROJECT_VERSION_MAJOR})
set(deb_same "(= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_LIB_PACKAGE_NAME libreplayalloc${deb_major})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_LIB_DESCRIPTION
    "${CPACK_PACKAGE_DESCRIPTION_SUMMARY} (shared library)\n${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libreplayalloc-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libreplayalloc${deb_major} ${deb_same}, libjemalloc-dev, libabsl-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "${CPACK_PACKAGE_DESCRIPTION_SUMMARY} (development files)\nHeaders, the static library, the CMake package and the pkg-config file.")
set(CPACK_DEBIAN_PRELOAD_PACKAGE_NAME replayalloc-preload)
set(CPACK_DEBIAN_PRELOAD_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_PRELOAD_DESCRIPTION
    "${CPACK_PACKAGE_DESCRIPTION_SUMMARY} (LD_PRELOAD library)\nlibreplayalloc_preload.so serves an unmodified program's malloc family.")
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-replayalloc)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "libreplayalloc${deb_major} ${deb_same}, python3")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
    "${CPACK_PACKAGE_DESCRIPTION_SUMMARY} (Python package)\nimport replayalloc.torch: PyTorch's CPU allocator and the CUDA pluggable allocator.")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME replayalloc-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
    "${CPACK_PACKAGE_DESCRIPTION_SUMMARY} (tools)\nThe replayalloc command: plans, reports, predictions and plan directories.")
if(TARGET replayalloc_torch_shared)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-torch")
endif()
