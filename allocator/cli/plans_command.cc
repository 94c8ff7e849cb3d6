// `replayalloc plans DIR`, `plans verify DIR`, `plans prune DIR`: a plan directory
// (REPLAYALLOC_PLAN_DIR) as a deployable artifact: what it holds, whether the engine
// would load each file, and removing what it would not.
//
// Layer: cli. Each file gets the verdict the engine would reach (cli/plan_dir.h: the
// directory through check_private_dir(), the file through read_private_file(),
// decode_plan(), the key, version and slot alignment, and the name the engine looks for).
//
// prune must never lose what is not ours: it unlinks names (never follows a link, and
// unlink() removes a link, not its target), only *.raplan files that verify calls
// stale or foreign, and write_file_atomic()'s temporary files (".<name>.raplan.<16
// hex>.tmp") older than --tmp-age, since a writer may be filling one right now. Before
// each unlink the name is looked at again: a file replaced since it was judged (a
// writer's rename) is left. A rename in the instant between that look and the unlink
// can still lose a fresh plan; it costs one recording at the next start, never data.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/plan_dir.h"
#include "planner/plan_file.h"
#include "support/config.h"
#include "support/file_io.h"

namespace replayalloc::cli {
namespace {

constexpr char usage[] =
    "usage: replayalloc plans DIR [--json]\n"
    "       replayalloc plans verify DIR [--json] [--slot-align N]\n"
    "       replayalloc plans prune DIR [--json] [--dry-run] [--slot-align N] [--tmp-age SECONDS]\n"
    "       replayalloc plans optimize DIR [--json] [--time-limit S] [--slot-align N]\n"
    "\n"
    "A plan directory (REPLAYALLOC_PLAN_DIR) as the engine sees it.\n"
    "\n"
    "plans DIR lists every *.raplan file: its key and domain (host, or cuda for a device\n"
    "plan), the library version and slot alignment it was made with, allocations, slab,\n"
    "lower bound, algorithm, the shapes it serves (exact sizes, or slots serving a range of\n"
    "requests up to their capacity), when it was made (UTC; the file's mtime for files\n"
    "older than the field) and the file's size.\n"
    "\n"
    "plans verify DIR says for every file whether the engine would load it:\n"
    "  ok                  loaded when its key is first used\n"
    "  corrupt             decode_plan() refuses it (the message says why)\n"
    "  truncated           it ends before its header says it does\n"
    "  other_version       made by another replayalloc version\n"
    "  other_slot_align    made with another slot alignment (--slot-align, default 64, as\n"
    "                      REPLAYALLOC_SLOT_ALIGN)\n"
    "  wrong_name          not the name the engine looks for under its key\n"
    "  unsafe              a link, not a regular file, or writable by other users\n"
    "  temporary           a writer's temporary file (killed mid-write, or writing now):\n"
    "                      never read, never a failure; prune removes old ones\n"
    "  not_a_plan          any other file: left alone, never a failure\n"
    "and refuses the whole directory when other users can write it. Exit code 0 when every\n"
    "plan would be loaded, 1 when any would be ignored or the directory is refused.\n"
    "\n"
    "plans prune DIR removes the *.raplan files verify would ignore as corrupt, truncated,\n"
    "other_version, other_slot_align or wrong_name, and temporary files older than\n"
    "--tmp-age (default 600 s). It never removes anything else: not an unsafe file, not a\n"
    "link's target, not a file of another name. --dry-run only says what it would remove.\n"
    "A directory verify refuses is not pruned (exit code 1).\n"
    "\n"
    "plans optimize DIR searches every plan verify calls ok for a smaller slab (the\n"
    "branch-and-bound search of `replayalloc plan --algo search`, --time-limit seconds per\n"
    "file, default 10) and rewrites a file, atomically and in the same format, only when\n"
    "it found one. Per file: the slab before and after, the lower bound, their ratio, and\n"
    "whether the slab is proven optimal. Exit code 1 when a file could not be searched or\n"
    "rewritten.\n"
    "\n"
    "  --json            one JSON object instead of the table\n"
    "  --slot-align N    the slot alignment of the processes that load DIR (default 64)\n"
    "  --tmp-age S       prune temporary files at least S seconds old (default 600)\n"
    "  --dry-run         prune: remove nothing, list what would be removed\n"
    "  --time-limit S    optimize: the search's budget per file in seconds (default 10)\n"
    "\n"
    "A directory named 'verify', 'prune' or 'optimize' is given as ./verify.\n";

// "2025-03-01T12:00:00Z"; "?" for a time gmtime cannot express.
std::string iso_utc(std::uint64_t seconds) {
  if (seconds > static_cast<std::uint64_t>(std::numeric_limits<std::time_t>::max())) return "?";
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  char buf[64];
  if (::gmtime_r(&t, &tm) == nullptr || std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
    return "?";
  }
  return buf;
}

// Names and messages quote the directory's contents; control bytes must not reach a
// terminal (JSON escapes them itself).
std::string printable(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

// Power of two up to 2 MiB, as `replayalloc plan --slot-align`.
std::optional<std::uint64_t> parse_slot_align(const std::string& s) {
  const std::optional<double> v = parse_number(s);
  if (!v || *v < 1 || *v > (1 << 21) || *v != static_cast<double>(static_cast<std::uint64_t>(*v))) {
    return std::nullopt;
  }
  const std::uint64_t a = static_cast<std::uint64_t>(*v);
  if (!std::has_single_bit(a)) return std::nullopt;
  return a;
}

// ---- plans DIR

// What the plan's slots serve (Note [Envelope] in trace/trace.h): each slot its exact
// size, or, where `least` says so, any request from least[i] up to its capacity.
struct shapes {
  std::uint64_t slots = 0, ranged = 0;
  std::uint64_t size_min = 0, size_max = 0;                  // over every slot
  std::uint64_t least_min = 0, capacity_min = 0, capacity_max = 0;  // over ranged slots
};

shapes shapes_of(const plan_file& f) {
  shapes s;
  for (std::size_t i = 0; i < f.tr.allocations.size() && i < f.p.offsets.size(); ++i) {
    if (f.p.offsets[i] == not_in_slab) continue;
    const std::uint64_t size = f.tr.allocations[i].size;
    s.size_min = s.slots == 0 ? size : std::min(s.size_min, size);
    s.size_max = std::max(s.size_max, size);
    ++s.slots;
    if (f.least.empty() || f.least[i] >= size) continue;
    s.least_min = s.ranged == 0 ? f.least[i] : std::min(s.least_min, f.least[i]);
    s.capacity_min = s.ranged == 0 ? size : std::min(s.capacity_min, size);
    s.capacity_max = std::max(s.capacity_max, size);
    ++s.ranged;
  }
  return s;
}

std::string shapes_json(const shapes& s) {
  json_object j;
  j.add("kind", s.ranged == 0 ? "exact" : "envelope")
      .add("slots", s.slots)
      .add("ranged_slots", s.ranged)
      .add("size_min", s.size_min)
      .add("size_max", s.size_max);
  if (s.ranged != 0) {
    j.add("least_min", s.least_min).add("capacity_min", s.capacity_min).add("capacity_max", s.capacity_max);
  }
  return j.str();
}

std::string shapes_text(const shapes& s) {
  if (s.slots == 0) return "no slots";
  if (s.ranged == 0) {
    return absl::StrFormat("exact sizes (%d slots, %s..%s)", s.slots, format_bytes(s.size_min),
                           format_bytes(s.size_max));
  }
  return absl::StrFormat("%d of %d slots serve a range (from %s up to capacities %s..%s), the rest exact sizes",
                         s.ranged, s.slots, format_bytes(s.least_min), format_bytes(s.capacity_min),
                         format_bytes(s.capacity_max));
}

struct made {
  std::uint64_t at = 0;
  bool from_mtime = false;
};

made made_of(const entry& e) {
  if (e.plan && e.plan->made_at != 0) return {e.plan->made_at, false};
  return {e.st.st_mtim.tv_sec > 0 ? static_cast<std::uint64_t>(e.st.st_mtim.tv_sec) : 0, true};
}

int run_list(const parsed_args& a) {
  const std::string& dir = a.positional[0];
  const absl::Status trusted = check_private_dir(dir);
  if (absl::IsNotFound(trusted)) return fail("plans", trusted);
  absl::StatusOr<std::vector<entry>> entries = judge_dir(dir, 64);
  if (!entries.ok()) return fail("plans", entries.status());
  std::uint64_t others = 0;
  std::vector<const entry*> plans;
  for (const entry& e : *entries) {
    if (is_plan_name(e.name)) {
      plans.push_back(&e);
    } else {
      ++others;
    }
  }

  if (a.has("--json")) {
    std::vector<std::string> rows;
    for (const entry* e : plans) {
      json_object j;
      j.add("file", e->name).add("size_bytes", static_cast<std::uint64_t>(e->st.st_size));
      if (!e->plan) {
        j.add("error", e->why);
        rows.push_back(j.str());
        continue;
      }
      const plan_file& f = *e->plan;
      const made m = made_of(*e);
      std::uint64_t planned = 0;
      for (const std::uint64_t off : f.p.offsets) planned += off != not_in_slab;
      j.add("key", f.tr.key)
          .add("domain", e->domain.empty() ? "unknown" : e->domain)
          .add("library_version", f.library_version)
          .add("slot_align", f.slot_align)
          .add("allocations", static_cast<std::uint64_t>(f.tr.allocations.size()))
          .add("planned", planned)
          .add("slab_bytes", f.p.slab_bytes)
          .add("lower_bound_bytes", f.p.lower_bound_bytes)
          .add("algorithm", f.p.algorithm)
          .add_raw("shapes", shapes_json(shapes_of(f)))
          .add("made", iso_utc(m.at))
          .add("made_at", m.at)
          .add("made_from", m.from_mtime ? "mtime" : "plan");
      rows.push_back(j.str());
    }
    json_object j;
    j.add("dir", dir);
    if (!trusted.ok()) j.add("dir_refused", std::string(trusted.message()));
    j.add_raw("plans", absl::StrCat("[", absl::StrJoin(rows, ","), "]")).add("other_files", others);
    std::printf("%s\n", j.str().c_str());
    return exit_ok;
  }

  std::string out = absl::StrFormat("replayalloc plans: %s (%d plan files, %d other files)\n",
                                    printable(dir), plans.size(), others);
  if (!trusted.ok()) {
    absl::StrAppend(&out, "  warning: the engine refuses this directory: ",
                    printable(std::string(trusted.message())), "\n");
  }
  if (!plans.empty()) {
    absl::StrAppend(&out, absl::StrFormat("\n  %-40s %-20s %-6s %7s %10s %11s  %-20s %9s\n", "file", "key",
                                          "domain", "allocs", "slab", "lower bound", "made (UTC)", "size"));
  }
  for (const entry* e : plans) {
    if (!e->plan) {
      absl::StrAppend(&out, absl::StrFormat("  %-40s %s\n", printable(e->name), printable(e->why)));
      continue;
    }
    const plan_file& f = *e->plan;
    const made m = made_of(*e);
    absl::StrAppend(&out, absl::StrFormat("  %-40s %-20s %-6s %7d %10s %11s  %-20s %9s\n", printable(e->name),
                                          printable(f.tr.key), e->domain.empty() ? "?" : e->domain,
                                          f.tr.allocations.size(), format_bytes(f.p.slab_bytes),
                                          format_bytes(f.p.lower_bound_bytes),
                                          absl::StrCat(iso_utc(m.at), m.from_mtime ? " (mtime)" : ""),
                                          format_bytes(static_cast<std::uint64_t>(e->st.st_size))));
    absl::StrAppend(&out, absl::StrFormat("      %s, replayalloc %s, slot alignment %d; %s\n",
                                          printable(f.p.algorithm), printable(f.library_version), f.slot_align,
                                          shapes_text(shapes_of(f))));
  }
  if (others != 0) absl::StrAppend(&out, "\n'replayalloc plans verify' says what the other files are.\n");
  std::fwrite(out.data(), 1, out.size(), stdout);
  return exit_ok;
}

// ---- plans verify DIR

int run_verify(const parsed_args& a, std::uint64_t slot_align) {
  const std::string& dir = a.positional[0];
  const absl::Status trusted = check_private_dir(dir);
  if (absl::IsNotFound(trusted)) return fail("plans verify", trusted);
  absl::StatusOr<std::vector<entry>> entries = judge_dir(dir, slot_align);
  if (!entries.ok()) return fail("plans verify", entries.status());
  std::uint64_t loaded = 0, ignored = 0, others = 0;
  for (const entry& e : *entries) {
    if (e.v == verdict::not_a_plan || e.v == verdict::temporary) {
      ++others;  // no reader opens them; prune takes old temporary files
    } else if (e.v == verdict::ok && trusted.ok()) {
      ++loaded;
    } else {
      ++ignored;
    }
  }
  const bool all_loaded = trusted.ok() && ignored == 0;

  if (a.has("--json")) {
    std::vector<std::string> rows;
    for (const entry& e : *entries) {
      json_object j;
      j.add("file", e.name)
          .add("verdict", verdict_name(e.v))
          .add("loaded", e.v == verdict::ok && trusted.ok())
          .add("why", e.why);
      if (e.plan) j.add("key", e.plan->tr.key).add("domain", e.domain.empty() ? "unknown" : e.domain);
      rows.push_back(j.str());
    }
    json_object j;
    j.add("dir", dir)
        .add("dir_ok", trusted.ok())
        .add("dir_why", std::string(trusted.message()))
        .add("library_version", REPLAYALLOC_VERSION_STRING)
        .add("slot_align", slot_align)
        .add_raw("files", absl::StrCat("[", absl::StrJoin(rows, ","), "]"))
        .add("loaded", loaded)
        .add("ignored", ignored)
        .add("left_alone", others)
        .add("ok", all_loaded);
    std::printf("%s\n", j.str().c_str());
    return all_loaded ? exit_ok : exit_failed;
  }

  std::string out = absl::StrFormat("replayalloc plans verify: %s (replayalloc %s, slot alignment %d)\n",
                                    printable(dir), REPLAYALLOC_VERSION_STRING, slot_align);
  if (!trusted.ok()) {
    absl::StrAppend(&out, "  directory refused: ", printable(std::string(trusted.message())),
                    "\n  (the engine loads no plan from it and saves none there)\n");
  }
  for (const entry& e : *entries) {
    std::string why = e.why;
    if (e.v == verdict::ok) why = absl::StrCat("key '", e.plan->tr.key, "' (", e.domain, ")");
    if (e.v == verdict::not_a_plan) why = "left alone";
    absl::StrAppend(&out, absl::StrFormat("  %-17s %-40s %s\n", verdict_name(e.v), printable(e.name),
                                          printable(why)));
  }
  absl::StrAppend(&out, absl::StrFormat("%d would be loaded, %d would be ignored, %d other files left alone\n",
                                        loaded, ignored, others));
  std::fwrite(out.data(), 1, out.size(), stdout);
  return all_loaded ? exit_ok : exit_failed;
}

// ---- plans prune DIR

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         (a.st_mode & S_IFMT) == (b.st_mode & S_IFMT);
}

int run_prune(const parsed_args& a, std::uint64_t slot_align, double tmp_age) {
  const std::string& dir = a.positional[0];
  if (const absl::Status trusted = check_private_dir(dir); !trusted.ok()) {
    return fail("plans prune", absl::Status(trusted.code(), absl::StrCat("not pruned: ", trusted.message())));
  }
  absl::StatusOr<std::vector<entry>> entries = judge_dir(dir, slot_align);
  if (!entries.ok()) return fail("plans prune", entries.status());
  const bool dry_run = a.has("--dry-run");

  struct outcome {
    const entry* e;
    std::string why;
  };
  std::vector<outcome> removed, kept, failed;
  for (const entry& e : *entries) {
    bool remove = stale_plan(e.v);
    std::string why = e.v == verdict::not_a_plan ? "left alone" : e.why;
    if (e.v == verdict::temporary) {
      const double age = age_seconds(e.st);
      if (!S_ISREG(e.st.st_mode)) {
        why = "a temporary name, but not a regular file: left alone";
      } else if (age < tmp_age) {
        why = absl::StrFormat("%s; younger than --tmp-age %g s", e.why, tmp_age);
      } else {
        remove = true;
      }
    }
    if (e.v == verdict::ok) why = absl::StrCat("key '", e.plan->tr.key, "' (", e.domain, ")");
    if (!remove) {
      kept.push_back({&e, why});
      continue;
    }
    if (dry_run) {
      removed.push_back({&e, why});
      continue;
    }
    // Looked at again: a file replaced since it was judged is not the one judged.
    const std::string path = absl::StrCat(dir, "/", e.name);
    struct stat now{};
    if (::lstat(path.c_str(), &now) != 0 || !same_file(now, e.st)) {
      kept.push_back({&e, "changed since it was judged: left alone"});
      continue;
    }
    if (::unlink(path.c_str()) != 0) {
      failed.push_back({&e, absl::StrCat("not removed: ", std::strerror(errno))});
      continue;
    }
    removed.push_back({&e, why});
  }

  if (a.has("--json")) {
    auto rows = [](const std::vector<outcome>& v) {
      std::vector<std::string> out;
      for (const outcome& o : v) {
        json_object j;
        j.add("file", o.e->name).add("verdict", verdict_name(o.e->v)).add("why", o.why);
        out.push_back(j.str());
      }
      return absl::StrCat("[", absl::StrJoin(out, ","), "]");
    };
    json_object j;
    j.add("dir", dir)
        .add("dry_run", dry_run)
        .add("slot_align", slot_align)
        .add("tmp_age_s", tmp_age)
        .add_raw("removed", rows(removed))
        .add_raw("kept", rows(kept))
        .add_raw("failed", rows(failed));
    std::printf("%s\n", j.str().c_str());
  } else {
    std::string out =
        absl::StrFormat("replayalloc plans prune: %s%s\n", printable(dir), dry_run ? " (dry run)" : "");
    const char* removed_word = dry_run ? "would remove" : "removed";
    for (const outcome& o : removed) {
      absl::StrAppend(&out, absl::StrFormat("  %-12s %-40s %s: %s\n", removed_word, printable(o.e->name),
                                            verdict_name(o.e->v), printable(o.why)));
    }
    for (const outcome& o : failed) {
      absl::StrAppend(&out, absl::StrFormat("  %-12s %-40s %s\n", "FAILED", printable(o.e->name),
                                            printable(o.why)));
    }
    for (const outcome& o : kept) {
      absl::StrAppend(&out, absl::StrFormat("  %-12s %-40s %s: %s\n", "kept", printable(o.e->name),
                                            verdict_name(o.e->v), printable(o.why)));
    }
    absl::StrAppend(&out, absl::StrFormat("%s %d, %s %d%s\n", removed_word, removed.size(),
                                          dry_run ? "would keep" : "kept", kept.size(),
                                          failed.empty() ? "" : absl::StrFormat(", %d failed", failed.size())));
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return failed.empty() ? exit_ok : exit_failed;
}

}  // namespace

int run_plans(const std::vector<std::string>& args) {
  std::string command = "plans";
  std::vector<std::string> rest = args;
  if (!rest.empty() && (rest[0] == "verify" || rest[0] == "prune" || rest[0] == "optimize")) {
    command = absl::StrCat("plans ", rest[0]);
    rest.erase(rest.begin());
  }
  std::vector<option_spec> specs = {{"--json", "", false}, {"--help", "-h", false}};
  if (command != "plans") specs.push_back({"--slot-align", ""});
  if (command == "plans optimize") specs.push_back({"--time-limit", ""});
  if (command == "plans prune") {
    specs.push_back({"--dry-run", "", false});
    specs.push_back({"--tmp-age", ""});
  }
  absl::StatusOr<parsed_args> a = parse_args(rest, specs);
  if (!a.ok()) return usage_error(command, usage, a.status());
  if (a->has("--help")) return print_help(usage);
  if (a->positional.size() != 1) return usage_error(command, usage, "expected one DIR");
  std::uint64_t slot_align = 64;
  if (const std::optional<std::string> s = a->get("--slot-align")) {
    const std::optional<std::uint64_t> v = parse_slot_align(*s);
    if (!v) {
      return usage_error(command, usage,
                         absl::StrCat("--slot-align '", *s, "' is not a power of two up to 2 MiB"));
    }
    slot_align = *v;
  }
  double tmp_age = 600;
  if (const std::optional<std::string> s = a->get("--tmp-age")) {
    const std::optional<double> v = parse_number(*s);
    if (!v) return usage_error(command, usage, absl::StrCat("--tmp-age '", *s, "' is not a number of seconds"));
    tmp_age = *v;
  }
  if (command == "plans optimize") {
    double limit = 10;
    if (const std::optional<std::string> s = a->get("--time-limit")) {
      const std::optional<double> v = parse_number(*s);
      if (!v || *v <= 0) return usage_error(command, usage, absl::StrCat("--time-limit '", *s, "' is not a positive number"));
      limit = *v;
    }
    return run_plans_optimize(*a, slot_align, limit);
  }
  if (command == "plans verify") return run_verify(*a, slot_align);
  if (command == "plans prune") return run_prune(*a, slot_align, tmp_age);
  return run_list(*a);
}

}  // namespace replayalloc::cli
