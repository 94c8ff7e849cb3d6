// replayalloc/planner/plan_file.h: plans on disk.
//
// Layer: planner (I/O of its results; no engine). A plan file (".raplan") holds what
// the engine needs to replay without recording again: the trace the plan was made
// from, one offset per allocation, and the key that says whether it may be used:
//   * the plan key (what the program calls this iteration),
//   * the input signature (trace::signature(): the allocation sequence it expects),
//   * the library version and the slot alignment it was planned with.
// Layout (little-endian): magic "RPLYPLAN", u32 format version, u32 flags, then
// length-prefixed strings (library version, algorithm), u64 slot_align, slab_bytes,
// lower_bound_bytes, signature, the binary trace (trace_io.h, length-prefixed), u64
// the number of offsets and one u64 offset per allocation, then what the flags say:
//   * bit 0 (flag_least): one u64 per allocation, the least request its slot serves
//     (an envelope plan, Note [Envelope] in trace/trace.h; without the flag every slot
//     serves exactly its size);
//   * bit 1 (flag_made): one u64, when the plan was made (seconds since the Unix epoch,
//     UTC); files written before the flag existed lack it and read as made_at 0;
// and a CRC-32C of every byte before it. A new optional field is a new flag bit, so
// the format version stays 1 and older files keep decoding; a file with a flag bit
// this build does not know is refused.
//
// decode_plan() trusts nothing: bad magic, another format version, a wrong checksum,
// truncation, an invalid trace or a placement that fails validate() are errors that say
// what was wrong. check_plan_key() says why a well-formed plan does not fit this
// program (another key, signature, version or alignment). Neither ever crashes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc {

inline constexpr std::uint32_t plan_format_version = 1;

struct plan_file {
  trace tr;                     // tr.key is the plan key
  placement p;                  // offsets for tr.allocations, same order
  std::uint64_t slot_align = 64;
  std::uint64_t signature = 0;  // tr.signature() when written
  std::string library_version;  // REPLAYALLOC_VERSION_STRING of the writer
  // Empty, or per allocation the least request its slot serves, in [1, size].
  std::vector<std::uint64_t> least;
  // When the plan was made, seconds since the Unix epoch; 0 when unknown (a file
  // written before flag_made existed). Written only when non-zero.
  std::uint64_t made_at = 0;
};

// A plan file for `t` and `p`, stamped with this library's version and the time now
// (::time(), which never allocates: callable inside the allocator).
plan_file make_plan_file(trace t, placement p, const planner_options& o);

std::string encode_plan(const plan_file& f);
absl::StatusOr<plan_file> decode_plan(std::string_view bytes);

// True when `bytes` begin like a plan file (its magic, or a prefix of it: an empty
// file too) but end before the lengths and counts in its own header say the file ends:
// it was cut short (an interrupted copy, a full disk). The lengths are read without the
// checksum, so a corrupt length can look the same; decode_plan() says "truncated" for
// such a file instead of "checksum mismatch", and `replayalloc plans verify` tells the
// two apart with it.
bool plan_file_cut_short(std::string_view bytes);

// OK when `f` may be replayed for `key` by this library with slot alignment
// `slot_align`; otherwise FailedPrecondition naming the first field that differs.
absl::Status check_plan_key(const plan_file& f, std::string_view key, std::uint64_t slot_align);

absl::StatusOr<plan_file> read_plan_file(const std::string& path);
absl::Status write_plan_file(const plan_file& f, const std::string& path);

// The CSV form the CLI writes: header "id,offset,size", one row per allocation placed
// in the slab, in trace order.
std::string encode_plan_csv(const plan_file& f);

// A file name for a plan key inside a plan directory: the key's printable characters
// (others as '_') and a hash of the whole key, so different keys never share a file.
std::string plan_file_name(std::string_view key);

}  // namespace replayalloc
