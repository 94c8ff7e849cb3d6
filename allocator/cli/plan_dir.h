// replayalloc/cli/plan_dir.h: a plan directory judged as the engine would judge it.
//
// Layer: cli. Each file of a plan directory (REPLAYALLOC_PLAN_DIR) gets the verdict the
// engine's load_saved_plan() would reach (runtime/plan_store.cc, Note [Plan files]): the
// file through read_private_file() (never a link, only a regular file no other user can
// write), decode_plan(), then the key, the library version and the slot alignment
// (check_plan_key()), and the name the engine looks for under its key. `replayalloc plans`
// (cli/plans_command.cc) lists, verifies and prunes from these verdicts.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/plan_file.h"

namespace replayalloc::cli {

enum class verdict {
  ok,
  corrupt,
  truncated,
  other_version,
  other_slot_align,
  wrong_name,
  unsafe,
  temporary,
  not_a_plan,
};

const char* verdict_name(verdict v);

// What prune may remove (a temporary file also needs its age).
bool stale_plan(verdict v);

// One directory entry, judged.
struct entry {
  std::string name;
  verdict v = verdict::not_a_plan;
  std::string why;               // empty for ok and not_a_plan
  std::optional<plan_file> plan;  // when it decoded
  std::string domain;            // "host" or "cuda" when the name fits the key, else empty
  struct stat st{};              // lstat() when judged
};

// A name ending in ".raplan".
bool is_plan_name(std::string_view name);

// Seconds since the entry's file was last modified.
double age_seconds(const struct stat& st);

// The directory's entries, sorted by name, each judged; NotFound when the directory
// cannot be opened, DataLoss when reading it fails. An entry removed while it is read
// is left out.
absl::StatusOr<std::vector<entry>> judge_dir(const std::string& dir, std::uint64_t slot_align);

}  // namespace replayalloc::cli
