// tests/cuda_fake/fake_cudart.h: control of the simulated CUDA runtime.
//
// libfake_cudart implements the part of the CUDA runtime API replayalloc uses, with
// host memory as device memory (so tests can write and check fill patterns) and
// streams as named queues that log what was enqueued on them. Tests read the log to
// check stream order (an event recorded on one stream, waited for on another).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fake_cuda {

// Device memory: total, and what cudaMalloc/cudaMallocAsync may hand out in all.
void set_device_memory(std::size_t total);
std::size_t device_memory_used();
// Everything enqueued or done so far, one line per call ("record ev3 s1", "wait s2 ev3",
// "malloc 4096", "malloc_async 512 s1", "free_async s1", "managed 1048576", ...).
std::vector<std::string> log();
void clear_log();
// A stream's id as the log names it ("s1"); the default stream is "s0".
std::string name(const void* stream);

}  // namespace fake_cuda
