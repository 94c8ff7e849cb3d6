# Note [Private jemalloc] (allocator/CMakeLists.txt): makes OUTPUT, a copy of jemalloc's
# PIC archive ARCHIVE (Debian: libjemalloc-dev's libjemalloc_pic.a) whose public names
# (malloc, free, operator new and delete, mallocx, mallctl, malloc_conf, ...) all carry
# the prefix replayalloc_je_, definitions and references alike; its internal names
# (je_*) keep theirs. libreplayalloc.so links OUTPUT with --exclude-libs, so none of it is
# visible outside the library, and only jemalloc_backend.cc (built with
# REPLAYALLOC_PRIVATE_JEMALLOC) calls it, by those names.
# Run as: cmake -DNM=nm -DOBJCOPY=objcopy -DOBJDUMP=objdump -DARCHIVE=libjemalloc_pic.a -DOUTPUT=out.a -P this file
cmake_minimum_required(VERSION 3.25)
foreach(v NM OBJCOPY OBJDUMP ARCHIVE OUTPUT)
  if(NOT ${v})
    message(FATAL_ERROR "private_jemalloc.cmake: ${v} is not set")
  endif()
endforeach()
execute_process(COMMAND ${NM} -g --defined-only ${ARCHIVE}
  OUTPUT_VARIABLE symbols RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "private_jemalloc.cmake: ${NM} ${ARCHIVE} failed")
endif()
string(REPLACE "\n" ";" lines "${symbols}")
set(map "")
set(names "")
foreach(line IN LISTS lines)
  # "0000000000000000 T name": an archive member's defined global symbols
  if(line MATCHES "^[0-9a-fA-F]+ [A-Za-z] ([^ ]+)$")
    set(name ${CMAKE_MATCH_1})
    if(NOT name MATCHES "^(je_|DW\\.ref\\.)" AND NOT name IN_LIST names)
      list(APPEND names ${name})
      string(APPEND map "${name} replayalloc_je_${name}\n")
    endif()
  endif()
endforeach()
if(NOT "malloc" IN_LIST names OR NOT "mallocx" IN_LIST names OR NOT "mallctl" IN_LIST names)
  message(FATAL_ERROR "private_jemalloc.cmake: ${ARCHIVE} does not define malloc, mallocx and mallctl: "
                      "not jemalloc 5 without a prefix")
endif()
# Note [The private jemalloc's fork handlers] (private_fork.cc): its call to
# pthread_atfork goes to replayalloc's, which registers them only where they matter.
string(APPEND map "pthread_atfork replayalloc_je_pthread_atfork\n")
file(WRITE ${OUTPUT}.syms "${map}")
# Note [A short process's first requests] (boot_heap.cc): jemalloc boots at its first
# call, not at load. Its one constructor (jemalloc.c's jemalloc_constructor, which only
# calls malloc_init, as every entry point does first) is dropped with the archive's
# .init_array; any other member with one stops the build (its constructors would be lost).
execute_process(COMMAND ${OBJDUMP} -h ${ARCHIVE} OUTPUT_VARIABLE headers RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "private_jemalloc.cmake: ${OBJDUMP} -h ${ARCHIVE} failed")
endif()
# (the section's own name: llvm-objdump lists its .rela.init_array too)
string(REGEX MATCHALL "[ \t]\\.init_array[ \t]" ctors "${headers}")
list(LENGTH ctors n_ctors)
if(n_ctors GREATER 1)
  message(FATAL_ERROR "private_jemalloc.cmake: ${ARCHIVE} has ${n_ctors} .init_array sections, not jemalloc.c's one")
endif()
# Note [jemalloc's zeroed globals last]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# jemalloc's zeroed globals (its .bss, 2.2 MiB: the radix tree's root alone is 2 MiB)
# lay between the library's own and libstdc++'s, so that the few pages a process's start
# writes there (the library's state, and libstdc++'s exception pool, written by its
# constructor at load) lay in two 2 MiB blocks, each with a page table that every
# fork() copies and every exit frees, where jemalloc had not even booted. Renamed .lbss
# here (the x86-64 linker's section for large zeroed data, placed after every other
# object's .bss), they follow them: those pages lie in one block (VmPTE 52 -> 48 KiB
# before the fallback's start; a fork and exit there 73.7 -> 71.1 us of CPU, by hand:
# bench/RESULTS.md, "The private jemalloc's zeroed globals last").
execute_process(COMMAND ${OBJCOPY} --redefine-syms=${OUTPUT}.syms --remove-section=.init_array
  --remove-section=.rela.init_array --rename-section .bss=.lbss ${ARCHIVE} ${OUTPUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "private_jemalloc.cmake: ${OBJCOPY} --redefine-syms failed on ${ARCHIVE}")
endif()
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
