// libFuzzer's entry point for one target, chosen at compile time
// (-DREPLAYALLOC_FUZZ_TARGET=trace_csv | trace_binary | plan).
#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return replayalloc::fuzz::REPLAYALLOC_FUZZ_TARGET(data, size);
}
