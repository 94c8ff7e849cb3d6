// tests/fuzz/fuzz_targets.h: the fuzz targets over the file readers.
//
// Each target takes arbitrary bytes and must never crash, hang or leak: a reader
// either returns an error that says what was wrong, or a value that passes the
// checks every consumer relies on (check_trace, validate) and survives a round trip
// (encode, then decode, gives the same value back). A broken promise aborts with a
// message, which libFuzzer reports as a crash and the corpus replay as a failure.
//
// Built twice: with clang and libFuzzer (fuzz_main.cc, run for a bounded time), and
// with the project's compiler into fuzz_replay, which runs every corpus file through
// the same functions (the corpus is a regression test).
#pragma once

#include <cstddef>
#include <cstdint>

namespace replayalloc::fuzz {

// decode_trace_csv, then the CSV and binary round trips and a plan of what it read.
int trace_csv(const std::uint8_t* data, std::size_t size);
// decode_trace_binary (as given, and with its checksum made right), then round trips.
int trace_binary(const std::uint8_t* data, std::size_t size);
// decode_plan (as given, and with both checksums made right), then validate and a
// round trip.
int plan(const std::uint8_t* data, std::size_t size);

}  // namespace replayalloc::fuzz
