// replayalloc/backend/jemalloc_names.h: jemalloc's non-standard API for the backend's
// sources (jemalloc_backend.cc, front_arena.cc, fallback_start.cc).
//
// Built with REPLAYALLOC_PRIVATE_JEMALLOC (libreplayalloc.so: Note [Private jemalloc]
// in allocator/CMakeLists.txt), jemalloc is a copy linked into the library whose public
// names carry the prefix replayalloc_je_ and are hidden: the names below are mapped to
// those before jemalloc.h declares them.
#pragma once

#if defined(REPLAYALLOC_PRIVATE_JEMALLOC)
#define mallocx replayalloc_je_mallocx
#define sallocx replayalloc_je_sallocx
#define nallocx replayalloc_je_nallocx
#define dallocx replayalloc_je_dallocx
#define sdallocx replayalloc_je_sdallocx
#define rallocx replayalloc_je_rallocx
#define mallctl replayalloc_je_mallctl
#endif
#include <jemalloc/jemalloc.h>
