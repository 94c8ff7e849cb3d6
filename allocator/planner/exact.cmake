# The exact planner (planner/exact.h): a MIP solved by GLPK's glpsol, run as a
# subprocess. Offline only, so it is its own library, never part of the core; the
# CLI links it for `--algo exact`. glpsol is looked for at run time (a missing solver
# is a clear NotFound error), so the library is built whether or not it is installed.
add_library(replayalloc_planner_exact STATIC ${CMAKE_CURRENT_LIST_DIR}/exact.cc)
target_link_libraries(replayalloc_planner_exact PUBLIC replayalloc replayalloc_internal)
target_compile_options(replayalloc_planner_exact PRIVATE -Wall -Wextra -Wno-unused-parameter)
find_program(REPLAYALLOC_GLPSOL glpsol)
if(NOT REPLAYALLOC_GLPSOL)
  message(STATUS "replayalloc: glpsol not found (apt install glpk-utils); the exact planner will say so when run")
endif()
