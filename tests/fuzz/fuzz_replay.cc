// fuzz_replay TARGET PATH...: runs every file under each PATH (a file or a folder)
// through the fuzz target TARGET (fuzz_targets.h), so that the committed corpus is a
// regression test on every build, with any compiler. A broken promise aborts, naming
// the file. Prints how many files ran; fails when there were none.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s trace_csv|trace_binary|plan PATH...\n", argv[0]);
    return 2;
  }
  int (*target)(const std::uint8_t*, std::size_t) = nullptr;
  if (std::strcmp(argv[1], "trace_csv") == 0) target = replayalloc::fuzz::trace_csv;
  if (std::strcmp(argv[1], "trace_binary") == 0) target = replayalloc::fuzz::trace_binary;
  if (std::strcmp(argv[1], "plan") == 0) target = replayalloc::fuzz::plan;
  if (target == nullptr) {
    std::fprintf(stderr, "fuzz_replay: unknown target '%s'\n", argv[1]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    if (fs::is_directory(argv[i], ec)) {
      for (const auto& e : fs::recursive_directory_iterator(argv[i])) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else if (fs::is_regular_file(argv[i], ec)) {
      files.emplace_back(argv[i]);
    } else {
      std::fprintf(stderr, "fuzz_replay: no such file or folder: %s\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "fuzz_replay %s: %s (%zu bytes)\n", argv[1], f.c_str(), bytes.size());
    target(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("fuzz_replay %s: %zu files, no promise broken\n", argv[1], files.size());
  return files.empty() ? 1 : 0;
}
