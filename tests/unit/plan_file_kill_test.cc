// A writer of plan files killed with SIGKILL at random moments (Note [Safe plan
// directories], support/file_io.h): a reader afterwards finds either no file or one
// whole plan (the one written before, or the one being written), never half of one,
// and the killed writer's temporary file is never taken for a plan. The plans are
// large (a few MB) so that most kills land in the middle of a write.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <dirent.h>
#include <random>
#include <string>
#include <vector>

#include "planner/plan_file.h"
#include "planner/planner.h"
#include "support/file_io.h"
#include "trace/trace.h"

namespace replayalloc {
namespace {

// A plan of `n` allocations of `size` bytes, each freed before the next: every slot at 0.
plan_file big_plan(std::uint64_t n, std::uint64_t size) {
  trace t;
  t.key = "request";
  t.ops = {"unknown"};
  for (std::uint64_t i = 0; i < n; ++i) {
    trace_allocation a;
    a.id = i;
    a.size = size;
    a.align = 16;
    a.alloc_at = 2 * i;
    a.free_at = 2 * i + 1;
    t.allocations.push_back(a);
  }
  t.events = 2 * n;
  placement p;
  p.offsets.assign(n, 0);
  p.slab_bytes = size;
  p.algorithm = "test";
  planner_options o;
  p.lower_bound_bytes = lower_bound(t, o);
  return make_plan_file(std::move(t), std::move(p), o);
}

std::vector<std::string> temporary_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) out.push_back(dir + "/" + name);
    }
    ::closedir(d);
  }
  return out;
}

TEST(PlanFileKill, AReaderNeverAcceptsAHalfWrittenPlan) {
  char tmpl[] = "/tmp/replayalloc_kill_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/" + plan_file_name("request");
  const plan_file a = big_plan(150000, 256), b = big_plan(150000, 512);
  const std::uint64_t sig_a = a.tr.signature(), sig_b = b.tr.signature();
  ASSERT_NE(sig_a, sig_b);
  const std::string bytes_a = encode_plan(a), bytes_b = encode_plan(b);
  std::mt19937 rng(12345);
  int mid_write = 0, whole = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Replace the file over and over, alternating between the two plans.
      for (unsigned i = 0;; ++i) {
        if (!write_file_atomic(path, i % 2 == 0 ? bytes_a : bytes_b).ok()) ::_exit(3);
      }
    }
    ::usleep(2000 + rng() % 40000);
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped on its own: " << status;
    const std::vector<std::string> tmps = temporary_files(dir);
    mid_write += tmps.empty() ? 0 : 1;
    absl::StatusOr<std::string> got = read_private_file(path);
    if (!got.ok()) {
      // Killed before its first write finished: nothing at the final name.
      EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
    } else {
      absl::StatusOr<plan_file> f = decode_plan(*got);
      ASSERT_TRUE(f.ok()) << "trial " << trial << ": " << f.status();
      EXPECT_TRUE(f->signature == sig_a || f->signature == sig_b);
      ++whole;
    }
    // The leftover temporary file is not a plan a reader would take: never at the
    // final name, and (when it is cut short) not even decodable.
    for (const std::string& t : tmps) {
      EXPECT_NE(t, path);
      ::unlink(t.c_str());
    }
  }
  std::printf("20 writers killed: %d mid-write (temporary file left), %d readers found a whole plan\n",
              mid_write, whole);
  EXPECT_GE(mid_write, 1) << "no kill landed in a write: the test did not test anything";
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace replayalloc
