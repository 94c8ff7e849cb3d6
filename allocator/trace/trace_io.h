// replayalloc/trace/trace_io.h: trace files, binary and CSV.
//
// Layer: trace. Two formats:
//  * binary (".ratrace"): versioned, little-endian, closed by a CRC-32C of every byte
//    before it. What the engine writes and reads back.
//  * CSV, the interchange format with other tools: the header
//      id,size,align,alloc_at,free_at,op
//    one row per allocation; an empty free_at means the allocation outlives the
//    iteration; op is free text (RFC 4180 quoting when it holds a comma or a quote).
// Readers never trust their input: every error is a Status that says what was wrong
// and where (byte offset or line number); nothing is half-read.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "support/file_io.h"  // read_file, write_file_atomic
#include "trace/trace.h"

namespace replayalloc {

inline constexpr std::uint32_t trace_format_version = 1;

std::string encode_trace_binary(const trace& t);
absl::StatusOr<trace> decode_trace_binary(std::string_view bytes);

std::string encode_trace_csv(const trace& t);
absl::StatusOr<trace> decode_trace_csv(std::string_view text);

// Files: the format is chosen by content when reading (binary magic, else CSV) and
// by extension when writing (".csv" is CSV, anything else binary).
absl::StatusOr<trace> read_trace_file(const std::string& path);
absl::Status write_trace_file(const trace& t, const std::string& path);


}  // namespace replayalloc
