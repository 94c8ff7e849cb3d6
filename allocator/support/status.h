// replayalloc/support/status.h: error handling for offline code (planner, trace I/O).
//
// Layer: support. Offline code returns absl::Status / absl::StatusOr; one macro turns
// a failed expectation into an InvalidArgument error whose message says what was
// wrong. The hot path and the hooks never use this: they return null or fall back.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

// Returns InvalidArgumentError(StrCat(msg...)) from the enclosing function unless cond.
#define REPLAYALLOC_EXPECTS(cond, ...)                                   \
  do {                                                                   \
    if (!(cond)) [[unlikely]]                                            \
      return ::absl::InvalidArgumentError(::absl::StrCat(__VA_ARGS__)); \
  } while (0)

// Propagates a non-OK status.
#define REPLAYALLOC_RETURN_IF_ERROR(expr)         \
  do {                                            \
    ::absl::Status _ra_status = (expr);           \
    if (!_ra_status.ok()) [[unlikely]] return _ra_status; \
  } while (0)
