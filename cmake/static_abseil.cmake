# Note [Static Abseil]
# ~~~~~~~~~~~~~~~~~~~~
# The LD_PRELOAD library is loaded into every process it is preloaded into; linked to
# Abseil's shared libraries it brought 30 of them along (start-up work, and a resident
# floor of about 6 MiB where glibc alone needs 2). So it carries the Abseil code it uses
# inside itself, hidden, as jemalloc and mimalloc ship one file (issue 33).
#
# Debian 12's libabsl-dev archives cannot be linked into a shared object: they are
# built for executables (-fPIE: local-exec thread-locals, R_X86_64_TPOFF32, and direct
# references to libstdc++'s vtables that assume copy relocations). So the pieces the
# library needs (REPLAYALLOC_ABSEIL_PIC_SOURCES below) are compiled here, as
# position-independent code with hidden visibility, from Abseil's Debian source package
# of the installed version with Debian's patches (scripts/setup.sh fetches it with
# `apt-get source` into /usr/local/src/replayalloc/abseil-VERSION); the headers used are
# the system's, identical to the package's. The library links them with
# --exclude-libs,ALL and -z defs (a symbol the list lacks is a link error, never a
# lookup error at run time): no Abseil symbol leaves it, none of the program's can
# reach it. Its ldd then lists only the C and C++ runtimes, libjemalloc and the loader
# (tests/install: the ldd check).
#
# REPLAYALLOC_STATIC_ABSEIL: AUTO (when the source is found), ON (fail without it), OFF.
# A target opts in with the property REPLAYALLOC_STATIC_ABSEIL ON; everything links
# Abseil through replayalloc_absl, which gives such a target the PIC archive and every
# other target Abseil's shared libraries.
set(REPLAYALLOC_STATIC_ABSEIL AUTO CACHE STRING
    "Carry Abseil inside the LD_PRELOAD library (Note [Static Abseil]): AUTO, ON or OFF")
set_property(CACHE REPLAYALLOC_STATIC_ABSEIL PROPERTY STRINGS AUTO ON OFF)
set(REPLAYALLOC_ABSEIL_SOURCE_DIR "" CACHE PATH
    "Abseil's source tree (Debian's source package of the installed version); empty: looked for under /usr/local/src/replayalloc")

# Every Abseil library the project uses; replayalloc_absl links them, or the PIC archive.
set(REPLAYALLOC_ABSL_LIBS absl::status absl::statusor absl::strings absl::flat_hash_map
    absl::flat_hash_set absl::btree absl::hash absl::symbolize)

# The members of those libraries the LD_PRELOAD library's code reaches (its link map).
set(REPLAYALLOC_ABSEIL_PIC_SOURCES
  base/internal/cycleclock.cc base/internal/low_level_alloc.cc base/internal/raw_logging.cc
  base/internal/spinlock.cc base/internal/spinlock_wait.cc base/internal/strerror.cc
  base/internal/sysinfo.cc base/internal/thread_identity.cc base/internal/throw_delegate.cc
  base/internal/unscaledcycleclock.cc
  container/internal/raw_hash_set.cc
  debugging/internal/address_is_readable.cc debugging/internal/demangle.cc
  debugging/internal/elf_mem_image.cc debugging/internal/vdso_support.cc
  debugging/stacktrace.cc debugging/symbolize.cc
  hash/internal/city.cc hash/internal/hash.cc hash/internal/low_level_hash.cc
  numeric/int128.cc
  profiling/internal/exponential_biased.cc
  status/status.cc status/status_payload_printer.cc status/statusor.cc
  strings/ascii.cc strings/charconv.cc strings/cord.cc strings/escaping.cc strings/match.cc
  strings/numbers.cc strings/str_cat.cc strings/string_view.cc
  strings/internal/charconv_bigint.cc strings/internal/charconv_parse.cc
  strings/internal/cord_internal.cc strings/internal/cord_rep_btree.cc
  strings/internal/cord_rep_btree_navigator.cc strings/internal/cord_rep_btree_reader.cc
  strings/internal/cord_rep_consume.cc strings/internal/cord_rep_crc.cc
  strings/internal/cord_rep_ring.cc strings/internal/cordz_functions.cc
  strings/internal/cordz_handle.cc strings/internal/cordz_info.cc strings/internal/escaping.cc
  strings/internal/memutil.cc strings/internal/utf8.cc
  strings/internal/str_format/arg.cc strings/internal/str_format/bind.cc
  strings/internal/str_format/extension.cc strings/internal/str_format/float_conversion.cc
  strings/internal/str_format/output.cc strings/internal/str_format/parser.cc
  synchronization/internal/create_thread_identity.cc synchronization/internal/graphcycles.cc
  synchronization/internal/per_thread_sem.cc synchronization/internal/waiter.cc
  synchronization/mutex.cc
  time/clock.cc time/duration.cc time/time.cc
  time/internal/cctz/src/time_zone_fixed.cc time/internal/cctz/src/time_zone_if.cc
  time/internal/cctz/src/time_zone_impl.cc time/internal/cctz/src/time_zone_info.cc
  time/internal/cctz/src/time_zone_libc.cc time/internal/cctz/src/time_zone_lookup.cc
  time/internal/cctz/src/time_zone_posix.cc time/internal/cctz/src/zone_info_source.cc)

set(REPLAYALLOC_HAVE_STATIC_ABSEIL OFF)
if(NOT REPLAYALLOC_STATIC_ABSEIL STREQUAL "OFF")
  set(abseil_src "${REPLAYALLOC_ABSEIL_SOURCE_DIR}")
  if(NOT abseil_src)
    # The installed libabsl-dev's version, as scripts/setup.sh names the folder.
    execute_process(COMMAND dpkg-query -W -f=\${Version} libabsl-dev
      OUTPUT_VARIABLE abseil_deb_version RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0 AND abseil_deb_version)
      set(abseil_src /usr/local/src/replayalloc/abseil-${abseil_deb_version})
    endif()
  endif()
  set(abseil_missing "")
  if(NOT abseil_src OR NOT EXISTS "${abseil_src}/absl/base/options.h")
    set(abseil_missing "no Abseil source tree at '${abseil_src}' (scripts/setup.sh fetches it)")
  else()
    # The source must be the installed headers' own: same options (inline namespace).
    file(READ "${abseil_src}/absl/base/options.h" src_options)
    file(READ "/usr/include/absl/base/options.h" sys_options)
    if(NOT src_options STREQUAL sys_options)
      set(abseil_missing "${abseil_src} is not the installed Abseil's source (absl/base/options.h differs from /usr/include's)")
    endif()
  endif()
  if(abseil_missing)
    if(REPLAYALLOC_STATIC_ABSEIL STREQUAL "ON")
      message(FATAL_ERROR "replayalloc: REPLAYALLOC_STATIC_ABSEIL=ON but ${abseil_missing}")
    endif()
    message(STATUS "replayalloc: Abseil inside the LD_PRELOAD library: NO (${abseil_missing}); it links Abseil's shared libraries")
  else()
    set(REPLAYALLOC_HAVE_STATIC_ABSEIL ON)
    message(STATUS "replayalloc: Abseil inside the LD_PRELOAD library: yes (PIC, hidden; from ${abseil_src})")
    list(TRANSFORM REPLAYALLOC_ABSEIL_PIC_SOURCES PREPEND ${abseil_src}/absl/)
    add_library(replayalloc_abseil_pic STATIC EXCLUDE_FROM_ALL ${REPLAYALLOC_ABSEIL_PIC_SOURCES})
    # As Debian builds it (C++17), position-independent, nothing exported; the system's
    # headers first (identical, checked above), then the source tree's private ones.
    set_target_properties(replayalloc_abseil_pic PROPERTIES CXX_STANDARD 17
      POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
    target_include_directories(replayalloc_abseil_pic SYSTEM PRIVATE ${abseil_src})
    target_compile_options(replayalloc_abseil_pic PRIVATE -w)
    # Its zeroed tables of 4 KiB and more (the mutexes' 8 KiB synch_event, never used
    # unless a mutex is named for debugging) go after every .bss, as the library's own do:
    # Note [Large zeroed tables last] (support/config.h). Abseil's code reaches them through
    # the GOT (medium model); none of it is on an allocation's path.
    # (GCC's flag; clang before 18 has no -mlarge-data-threshold: there they stay in .bss.)
    include(CheckCXXCompilerFlag)
    check_cxx_compiler_flag(-mlarge-data-threshold=4096 REPLAYALLOC_CXX_HAS_LARGE_DATA_THRESHOLD)
    if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND REPLAYALLOC_CXX_HAS_LARGE_DATA_THRESHOLD)
      target_compile_options(replayalloc_abseil_pic PRIVATE -mcmodel=medium -mlarge-data-threshold=4096)
    endif()
    target_link_libraries(replayalloc_abseil_pic PUBLIC Threads::Threads)
  endif()
endif()

# replayalloc_absl: Abseil for every target; the PIC archive (and the link options that
# hide it) for a target whose property REPLAYALLOC_STATIC_ABSEIL is ON.
add_library(replayalloc_absl INTERFACE)
set(static_absl "$<BOOL:$<TARGET_PROPERTY:REPLAYALLOC_STATIC_ABSEIL>>")
foreach(lib IN LISTS REPLAYALLOC_ABSL_LIBS)
  target_link_libraries(replayalloc_absl INTERFACE "$<$<NOT:${static_absl}>:${lib}>")
endforeach()
if(REPLAYALLOC_HAVE_STATIC_ABSEIL)
  target_link_libraries(replayalloc_absl INTERFACE "$<${static_absl}:replayalloc_abseil_pic>")
  target_link_options(replayalloc_absl INTERFACE
    "$<${static_absl}:LINKER:--exclude-libs,ALL>" "$<${static_absl}:LINKER:-z,defs>")
endif()

# replayalloc_static_abseil(TARGET...): those targets carry Abseil inside (when built).
function(replayalloc_static_abseil)
  if(REPLAYALLOC_HAVE_STATIC_ABSEIL)
    set_target_properties(${ARGN} PROPERTIES REPLAYALLOC_STATIC_ABSEIL ON)
  endif()
endfunction()
