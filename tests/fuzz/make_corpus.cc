// make_corpus OUT_DIR: writes the seed corpora of the fuzz targets (committed under
// tests/fuzz/corpus/<target>/): valid inputs made by the encoders, and malformed ones
// (empty, truncated, another format version, a flipped byte, another program's file).
// Run it again when a format changes; fuzz_replay then checks the new seeds.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "planner/plan_file.h"
#include "planner/planner.h"
#include "support/hash.h"
#include "trace/trace_io.h"

namespace fs = std::filesystem;
using namespace replayalloc;

namespace {

fs::path g_out;

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

trace_allocation alloc(std::uint64_t id, std::uint64_t size, std::uint64_t at, std::uint64_t free_at,
                       std::uint32_t op = 0, std::uint32_t align = 16) {
  trace_allocation a;
  a.id = id;
  a.size = size;
  a.alloc_at = at;
  a.free_at = free_at;
  a.op = op;
  a.align = align;
  return a;
}

std::vector<trace> seed_traces() {
  std::vector<trace> ts;
  trace small;  // a layer: input, workspace, output
  small.key = "resnet50/bs1";
  small.ops = {"unknown", "aten::conv2d", "aten::relu"};
  small.allocations = {alloc(0, 4096, 0, 3, 1), alloc(1, 100, 1, 2, 2), alloc(2, 8192, 2, 5, 1)};
  small.events = 6;
  ts.push_back(small);

  trace outliving;  // an output that outlives the iteration; op names CSV must quote
  outliving.key = "bert, seq \"128\"";
  outliving.ops = {"unknown", "aten::add, inplace", "say \"hi\""};
  outliving.allocations = {alloc(0, 64, 0, 2, 1), alloc(1, 1 << 20, 1, never_freed, 2),
                           alloc(2, 64, 2, 4, 0, 4096), alloc(3, 3, 3, 5, 1, 1)};
  outliving.events = 6;
  ts.push_back(outliving);

  trace random;  // many short lifetimes, as inference has
  random.key = "random";
  random.ops = {"unknown", "a", "b", "c"};
  std::mt19937_64 rng(42);
  for (std::uint64_t i = 0; i < 24; ++i) {
    const std::uint64_t end = rng() % 8 == 0 ? never_freed : 2 * i + 1 + rng() % 10;
    random.allocations.push_back(alloc(i, 1 + rng() % 100000, 2 * i, end, static_cast<std::uint32_t>(rng() % 4),
                                       1u << (rng() % 8)));
  }
  random.events = 60;
  ts.push_back(random);

  trace empty;
  empty.ops = {"unknown"};
  ts.push_back(empty);
  return ts;
}

// The same bytes with one byte flipped, and the checksum(s) left as they were.
std::string flipped(std::string s, std::size_t at) {
  if (!s.empty()) s[at % s.size()] ^= 0x20;
  return s;
}

std::string with_version(std::string s, std::uint32_t version) {
  std::memcpy(&s[8], &version, 4);
  const std::uint32_t crc = detail::crc32c(0, s.data(), s.size() - 4);
  std::memcpy(&s[s.size() - 4], &crc, 4);
  return s;
}

const std::string k_elf("\x7f" "ELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x3e\x00", 20);
const std::string k_png("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", 16);

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  const std::vector<trace> ts = seed_traces();
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const std::string n = std::to_string(i);
    const std::string csv = encode_trace_csv(ts[i]);
    const std::string bin = encode_trace_binary(ts[i]);
    write("trace_csv", "valid-" + n + ".csv", csv);
    write("trace_binary", "valid-" + n + ".ratrace", bin);
    write("trace_binary", "truncated-" + n + ".ratrace", bin.substr(0, bin.size() / 2));
    write("trace_binary", "flipped-" + n + ".ratrace", flipped(bin, bin.size() / 3));
    planner_options o;
    if (i == 2) o.slot_align = 256;
    absl::StatusOr<placement> p = plan_greedy_by_size(ts[i], o);
    if (!p.ok()) return 1;
    const std::string plan = encode_plan(make_plan_file(ts[i], *p, o));
    write("plan", "valid-" + n + ".raplan", plan);
    write("plan", "truncated-" + n + ".raplan", plan.substr(0, plan.size() - 9));
    write("plan", "flipped-" + n + ".raplan", flipped(plan, plan.size() / 2));
    if (i == 0) {
      write("trace_binary", "version-2.ratrace", with_version(bin, 2));
      write("plan", "version-9.raplan", with_version(plan, 9));
      write("plan", "a-trace.raplan", bin);
      write("trace_binary", "a-plan.ratrace", plan);
      write("trace_csv", "truncated.csv", csv.substr(0, csv.size() - 7));
    }
  }
  // Malformed CSV, one mistake each.
  const std::string header = "id,size,align,alloc_at,free_at,op\n";
  write("trace_csv", "header-only.csv", header);
  write("trace_csv", "no-header.csv", "0,64,16,0,1,x\n");
  write("trace_csv", "negative.csv", header + "0,-64,16,0,1,x\n");
  write("trace_csv", "unbalanced-quote.csv", header + "0,64,16,0,1,\"x\n");
  write("trace_csv", "duplicate-id.csv", header + "0,64,16,0,1,x\n0,64,16,1,2,y\n");
  write("trace_csv", "freed-before.csv", header + "0,64,16,5,3,x\n");
  write("trace_csv", "align-3.csv", header + "0,64,3,0,1,x\n");
  write("trace_csv", "too-big.csv", header + "0,999999999999999999999,16,0,1,x\n");
  write("trace_csv", "crlf-and-blank.csv", "id,size,align,alloc_at,free_at,op\r\n\r\n7,5,1,0,,\"a \"\"q\"\"\"\r\n");
  for (const char* t : {"trace_csv", "trace_binary", "plan"}) {
    write(t, "empty", "");
    write(t, "elf", k_elf);
    write(t, "png", k_png);
  }
  std::printf("make_corpus: wrote %s\n", g_out.c_str());
  return 0;
}
