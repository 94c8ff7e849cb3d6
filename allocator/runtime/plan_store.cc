// Plans and traces on disk (runtime/engine.h): where a key's plan is loaded from and
// saved to (Note [Plan files], Note [Plan cache]), under the rules of Note [Safe plan
// directories] (support/file_io.h).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "planner/plan_file.h"
#include "runtime/engine.h"
#include "support/file_io.h"
#include "support/log.h"
#include "support/reentry.h"
#include "trace/trace_io.h"

namespace replayalloc::detail {

// Note [Plan files]
// ~~~~~~~~~~~~~~~~~
// With REPLAYALLOC_PLAN_DIR set, every plan the engine makes is saved there (its trace
// and the placement before any device adjustment, under the key, the library version
// and the slot alignment), and a key's entry, when first made, loads its file: a
// restarted service replays from its first iteration. A file that cannot be read, is
// corrupt, or belongs to another key, library version or slot alignment is ignored with
// a message, and the key records as usual. A loaded plan the program does not follow
// (its first replayed iteration deviates) is retired at once and the key recorded
// again; what deviated was served by the backend like any other miss (invariant 1), so
// a stale file costs an iteration, never data.
//
// Note [Plan cache]
// ~~~~~~~~~~~~~~~~~
// A fleet ships its plans read-only (REPLAYALLOC_PLAN_DIR baked into an image or
// mounted read-only: only read) and may name a writable directory for what a replica
// learns on its own (REPLAYALLOC_PLAN_CACHE: plans of keys the shipped directory lacks,
// plans grown to larger shapes, plans re-recorded because a shipped one no longer
// fits). With a cache, new plans are saved only there, never to the plan directory. A
// key loads the newer (by modification time) of its two files that can be used, so a
// plan re-made here wins over the shipped one it replaced, and a newer shipped plan (a
// new image) wins over an old cache. Any number of processes may share either
// directory: a file is replaced whole by rename (support/file_io.h), the last writer of
// identical plans wins, and a reader sees one whole file or none.

std::string engine::plan_path(const char* dir, const key_entry& e) const {
  const std::string name = e.kind == domain_kind::host ? e.key : "cuda:" + e.key;
  return std::string(dir) + "/" + plan_file_name(name);
}

// Note [Safe plan directories] (support/file_io.h): plans are read only from a
// directory no other user can write, and only from regular files only their owner
// can write; a refused directory is named once, with its mode, and the process runs
// on as without it (recording; nothing saved there either).
bool engine::plan_dir_trusted(const char* dir) {
  if (dir[0] == '\0') return false;
  const absl::Status st = check_private_dir(dir);
  if (st.ok()) return true;
  const bool cache = dir == opts_.plan_cache;
  static std::atomic<bool> said[2];
  if (!said[cache].exchange(true)) {
    REPLAYALLOC_LOG(error, "%s refused: %.*s; %s", cache ? "REPLAYALLOC_PLAN_CACHE" : "REPLAYALLOC_PLAN_DIR",
                    static_cast<int>(st.message().size()), st.message().data(),
                    cache ? "new plans are not saved there" : "plans are neither loaded nor saved there");
  }
  return false;
}

// Where a new plan is saved: REPLAYALLOC_PLAN_CACHE when named (Note [Plan cache]),
// else REPLAYALLOC_PLAN_DIR when this process may write it. A plan directory this
// process cannot write (baked into an image, mounted read-only) is only read: new plans
// stay in memory, said once. nullptr: nowhere.
const char* engine::plan_save_dir() {
  if (opts_.plan_cache[0] != '\0') return plan_dir_trusted(opts_.plan_cache) ? opts_.plan_cache : nullptr;
  if (!plan_dir_trusted(opts_.plan_dir)) return nullptr;
  if (::access(opts_.plan_dir, W_OK) == 0) return opts_.plan_dir;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    REPLAYALLOC_LOG(info, "REPLAYALLOC_PLAN_DIR %s is read-only here (%s): plans are loaded from it, "
                    "new plans stay in memory (REPLAYALLOC_PLAN_CACHE names a directory for them)",
                    opts_.plan_dir, std::strerror(errno));
  }
  return nullptr;
}

namespace {

// A plan file found for a key: its path and modification time (0 when absent).
struct plan_candidate {
  std::string path;
  std::int64_t mtime_ns = 0;
};

std::int64_t mtime_ns(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

void engine::load_saved_plan(key_entry& e) {
  // The cache first on equal times: it was written by this deployment.
  plan_candidate c[2];
  int n = 0;
  for (const char* dir : {static_cast<const char*>(opts_.plan_cache), static_cast<const char*>(opts_.plan_dir)}) {
    if (!plan_dir_trusted(dir)) continue;
    c[n].path = plan_path(dir, e);
    c[n].mtime_ns = mtime_ns(c[n].path);
    ++n;
  }
  if (n == 2 && c[1].mtime_ns > c[0].mtime_ns) std::swap(c[0], c[1]);
  // The older is tried when the newer cannot be used (said, and counted, as ignored).
  for (int i = 0; i < n; ++i) {
    if (load_plan_file(e, c[i].path)) return;
  }
}

bool engine::load_plan_file(key_entry& e, const std::string& path) {
  absl::StatusOr<std::string> bytes = read_private_file(path);
  if (!bytes.ok()) {
    if (!absl::IsNotFound(bytes.status())) {
      plan_files_ignored_.fetch_add(1, std::memory_order_relaxed);
      REPLAYALLOC_LOG(warning, "plan file for '%s' not read (%.*s); recording it", e.key.c_str(),
                      static_cast<int>(bytes.status().message().size()), bytes.status().message().data());
    }
    return false;
  }
  absl::StatusOr<plan_file> f = decode_plan(*bytes);
  const absl::Status ok = f.ok() ? check_plan_key(*f, e.key, opts_.slot_align) : f.status();
  if (!ok.ok()) {
    plan_files_ignored_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(warning, "plan file %s ignored: %.*s; recording '%s' instead", path.c_str(),
                    static_cast<int>(ok.message().size()), ok.message().data(), e.key.c_str());
    return false;
  }
  // A key is loaded when it is made: it has not failed (not on probation).
  if (!install_plan(e, f->tr, std::move(f->p), true, 0, f->least.empty() ? nullptr : &f->least, false, false,
                    nullptr, false)) {
    return false;
  }
  plans_loaded_.fetch_add(1, std::memory_order_relaxed);
  REPLAYALLOC_LOG(info, "'%s': plan loaded from %s", e.key.c_str(), path.c_str());
  return true;
}

void engine::save_plan(key_entry& e, const trace& tr, const placement& p,
                       const std::vector<std::uint64_t>& least) {
  if (opts_.plan_dir[0] == '\0' && opts_.plan_cache[0] == '\0') return;
  const char* dir = plan_save_dir();
  if (dir == nullptr) return;
  planner_options po;
  po.slot_align = opts_.slot_align;
  const std::string path = plan_path(dir, e);
  plan_file f = make_plan_file(with_op_names(tr), p, po);  // Note [Deferred op names]
  if (std::any_of(least.begin(), least.end(), [](std::uint64_t l) { return l == 1; })) f.least = least;
  const absl::Status st = write_plan_file(f, path);
  if (!st.ok()) {
    REPLAYALLOC_LOG(warning, "plan for '%s' not saved: %.*s", e.key.c_str(),
                    static_cast<int>(st.message().size()), st.message().data());
  } else {
    REPLAYALLOC_LOG(info, "'%s': plan saved to %s", e.key.c_str(), path.c_str());
  }
}

int engine::save_trace(std::string_view key, const std::string& path) {
  reentry_guard guard;
  std::shared_ptr<const trace> tr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = keys_.find(absl::string_view(key.data(), key.size()));
    if (it != keys_.end()) {
      std::lock_guard<std::mutex> elock(it->second->mu);
      tr = it->second->last_trace;
    }
  }
  if (tr == nullptr) {
    REPLAYALLOC_LOG(error, "save_trace: no recording of '%.*s' yet", static_cast<int>(key.size()),
                    key.data());
    return -1;
  }
  const absl::Status st = write_trace_file(with_op_names(*tr), path);
  if (!st.ok()) {
    REPLAYALLOC_LOG(error, "save_trace: %.*s", static_cast<int>(st.message().size()),
                    st.message().data());
    return -1;
  }
  return 0;
}

}  // namespace replayalloc::detail
