// The exact planner: writes the model of Note [Exact model] (exact.h) in GMPL to a
// temporary directory, runs glpsol on it with a time limit, reads the offsets glpsol
// prints, and checks them with validate(). Offline only (see exact.h).
#include "planner/exact.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "support/status.h"
#include "trace/trace_io.h"

extern char** environ;

namespace replayalloc {
namespace {

bool intersect(const trace_allocation& a, const trace_allocation& b) {
  return a.alloc_at < b.free_at && b.alloc_at < a.free_at;
}

// A temporary directory, removed when this goes out of scope (unless kept).
struct temp_dir {
  std::string path;
  bool keep = false;
  ~temp_dir() {
    if (!path.empty() && !keep) {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  }
};

absl::StatusOr<std::string> make_temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/replayalloc-exact-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("exact planner: cannot make a temporary directory from ", templ,
                                            ": ", std::strerror(errno)));
  }
  return std::string(buf.data());
}

// Runs `argv` with stdout and stderr into `log_path`; returns its exit status.
absl::StatusOr<int> run_solver(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc == ENOENT) {
    return absl::NotFoundError(absl::StrCat("exact planner: the MIP solver '", argv[0],
                                            "' is not installed (Debian: apt install glpk-utils)"));
  }
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("exact planner: cannot run '", argv[0], "': ", std::strerror(rc)));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("exact planner: waitpid: ", std::strerror(errno)));
  }
  if (!WIFEXITED(status)) {
    return absl::InternalError(absl::StrCat("exact planner: '", argv[0], "' was killed by signal ",
                                            WIFSIGNALED(status) ? WTERMSIG(status) : 0));
  }
  return WEXITSTATUS(status);
}

std::string last_lines(const std::string& text, int n) {
  std::size_t at = text.size();
  for (int k = 0; k <= n && at > 0; ++k) {
    const std::size_t nl = text.rfind('\n', at - 1);
    if (nl == std::string::npos) return text;
    at = nl;
  }
  return text.substr(at + 1);
}

}  // namespace

absl::StatusOr<placement> plan_exact(const trace& t, const planner_options& o, const exact_options& x) {
  REPLAYALLOC_EXPECTS(x.time_limit_s > 0, "exact planner: the time limit must be positive, not ", x.time_limit_s);
  absl::StatusOr<placement> best = plan_best(t, o);  // checks the trace and the options
  REPLAYALLOC_RETURN_IF_ERROR(best.status());
  const auto& all = t.allocations;
  std::vector<std::uint32_t> items;
  for (std::uint32_t i = 0; i < all.size(); ++i) {
    if (!all[i].outlives()) items.push_back(i);
  }
  if (items.size() > x.max_allocations) {
    return absl::FailedPreconditionError(absl::StrCat(
        "exact planner: ", items.size(), " allocations to place, more than the ", x.max_allocations,
        " it accepts (the model grows with their square); use a greedy planner"));
  }
  if (items.empty() || (!x.always_solve && best->slab_bytes <= best->lower_bound_bytes)) {
    best->algorithm = "exact(lower bound)";  // nothing can beat the bound: optimal
    return best;
  }

  // The model, in units of slot_align (every footprint and alignment is a multiple).
  const std::uint64_t unit = o.slot_align;
  const std::uint64_t ub = best->slab_bytes / unit, lb = best->lower_bound_bytes / unit;
  absl::StatusOr<std::string> dir_path = make_temp_dir();
  REPLAYALLOC_RETURN_IF_ERROR(dir_path.status());
  temp_dir dir{*dir_path, x.keep_files};
  const std::string model_path = dir.path + "/model.mod", out_path = dir.path + "/solution.txt",
                    log_path = dir.path + "/glpsol.log";
  std::ostringstream m;
  m << "# replayalloc exact planner: trace '" << t.key.substr(0, 64) << "', " << items.size()
    << " allocations; Note [Exact model] in planner/exact.h\n"
    << "set I; param s{I}; param a{I}; param UB; param LB;\n"
    << "set C within {I, I};\n"
    << "var k{i in I} integer >= 0, <= floor((UB - s[i]) / a[i]);\n"
    << "var z{C} binary;\n"
    << "var H integer >= LB, <= UB;\n"
    << "minimize slab: H;\n"
    << "s.t. top{i in I}: a[i] * k[i] + s[i] <= H;\n"
    << "s.t. below{(i, j) in C}: a[i] * k[i] + s[i] <= a[j] * k[j] + UB * z[i, j];\n"
    << "s.t. above{(i, j) in C}: a[j] * k[j] + s[j] <= a[i] * k[i] + UB * (1 - z[i, j]);\n"
    << "solve;\n"
    << "printf \"H %d\\n\", H > \"" << out_path << "\";\n"
    << "printf {i in I}: \"%d %d\\n\", i, k[i] >> \"" << out_path << "\";\n"
    << "data;\nset I :=";
  for (const std::uint32_t i : items) m << ' ' << i;
  m << ";\nparam s :=";
  for (const std::uint32_t i : items) m << ' ' << i << ' ' << slot_footprint(all[i], o) / unit;
  m << ";\nparam a :=";
  for (const std::uint32_t i : items) m << ' ' << i << ' ' << slot_alignment(all[i], o) / unit;
  m << ";\nparam UB := " << ub << ";\nparam LB := " << lb << ";\nset C :=";
  for (std::size_t p = 0; p < items.size(); ++p) {
    for (std::size_t q = p + 1; q < items.size(); ++q) {
      if (intersect(all[items[p]], all[items[q]])) m << " (" << items[p] << ',' << items[q] << ')';
    }
  }
  m << ";\nend;\n";
  REPLAYALLOC_RETURN_IF_ERROR(write_file_atomic(model_path, m.str()));

  absl::StatusOr<int> rc = run_solver(
      {x.solver, "--math", model_path, "--tmlim", std::to_string(x.time_limit_s)}, log_path);
  REPLAYALLOC_RETURN_IF_ERROR(rc.status());
  const std::string log = read_file(log_path).value_or("");
  if (*rc != 0) {
    dir.keep = true;
    return absl::InternalError(absl::StrCat("exact planner: ", x.solver, " exited with status ", *rc,
                                            " (model and log kept in ", dir.path, "):\n", last_lines(log, 5)));
  }
  const bool optimal = log.find("INTEGER OPTIMAL SOLUTION FOUND") != std::string::npos;
  const bool timed_out = log.find("TIME LIMIT EXCEEDED") != std::string::npos;
  if (!optimal && !timed_out) {
    dir.keep = true;
    return absl::InternalError(absl::StrCat("exact planner: ", x.solver, " found no solution (model and log kept in ",
                                            dir.path, "):\n", last_lines(log, 5)));
  }

  // Read "H <slab>" and "<index> <k>" lines back into a placement.
  placement p;
  p.offsets.assign(all.size(), not_in_slab);
  p.lower_bound_bytes = best->lower_bound_bytes;
  std::ifstream in(out_path);
  std::string word;
  std::uint64_t h = 0;
  std::size_t read = 0;
  if (!(in >> word >> h) || word != "H") {
    // Stopped by the time limit before any integer solution: glpsol writes no solution
    // (its printf statements run after the solve). "best" stands, as below.
    if (timed_out && !optimal) {
      placement b = *std::move(best);
      b.algorithm = "exact(time limit)";
      return b;
    }
    dir.keep = true;
    return absl::InternalError(absl::StrCat("exact planner: unreadable solution in ", out_path));
  }
  for (std::uint64_t i = 0, k = 0; in >> i >> k; ++read) {
    if (i >= all.size() || all[i].outlives()) {
      dir.keep = true;
      return absl::InternalError(absl::StrCat("exact planner: the solution names allocation ", i, " (", out_path, ")"));
    }
    p.offsets[i] = k * slot_alignment(all[i], o);
    p.slab_bytes = std::max(p.slab_bytes, p.offsets[i] + slot_footprint(all[i], o));
  }
  const absl::Status valid = read == items.size() ? validate(t, p, o)
                                                  : absl::InternalError("not every allocation was placed");
  if (optimal) {
    if (!valid.ok()) {
      dir.keep = true;
      return absl::InternalError(absl::StrCat("exact planner: the solver's placement is invalid (", valid.message(),
                                              "; files kept in ", dir.path, ")"));
    }
    p.algorithm = "exact";
    return p;
  }
  // Time limit: the incumbent when there is a valid, better one, else "best".
  if (!valid.ok() || p.slab_bytes >= best->slab_bytes) p = *std::move(best);
  p.algorithm = "exact(time limit)";
  return p;
}

}  // namespace replayalloc
