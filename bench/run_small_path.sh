#!/usr/bin/env bash
# bench/run_small_path.sh: the small path (issue 34, part 4): requests below
# REPLAYALLOC_MIN_SIZE, which the LD_PRELOAD library hands to its fallback (jemalloc)
# without recording, planning or watching them, against the general-purpose
# allocators. Two measures, side by side in one run:
#   - CPU time per malloc+free pair (bench/micro/pair_bench.cc, "bare" pairs of 8 B to
#     4 KiB, 1, 2 and 4 threads), each allocator in a process of its own per round, the
#     order rotated; replayalloc as an unmodified program gets it (LD_PRELOAD of
#     libreplayalloc_preload.so, its defaults: auto mode, 4 KiB minimum) and with
#     REPLAYALLOC_MODE=off (the interposition alone); each benchmark runs 20 ms of pairs
#     unmeasured before its timed ones (a process's first ~10 ms run every allocator's
#     pairs ~1.5x slower, and the size measured first, 8 B, took them: bench/RESULTS.md,
#     "What is left on item 1 at aa15791");
#     and, at one thread, the same pairs with malloc and free called through pointers
#     (pair_bench's viaptr: no PLT jump before each call, whose prediction moved every
#     allocator's pair by up to 1.5x from one process to the next on an AMD EPYC host);
#   - instructions per pair under callgrind (bench/micro/preload_callgrind.cc, a program
#     that calls plain malloc/free, or operator new/delete with `new`), deterministic.
# Writes the "Small path" section of RESULTS.md.
# Usage: bench/run_small_path.sh [ROUNDS]   (default 5)
# Environment: BUILD_DIR (default <repo>/build); RESULTS_SECTION (default small-path); BEFORE_LIB, the preload library of
# another build (an earlier commit's), run beside as replayalloc-before with its defaults.
# shellcheck source=lib.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-5}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number (got '$rounds')"
build=${BUILD_DIR:-$root/build}
cmake --build "$build" --target pair_bench preload_callgrind hotpath_callgrind replayalloc_preload > /dev/null || die "build failed"
command -v valgrind > /dev/null || die "valgrind is not installed (scripts/setup.sh installs it)"
scratch_dir
machine_meta "$build" > "$tmp/meta"
preload=$(preload_library "$build")
allocators=(glibc jemalloc tcmalloc mimalloc replayalloc replayalloc-off)
[[ -z ${BEFORE_LIB:-} ]] || allocators+=(replayalloc-before)
lib_of() {
  case $1 in
    glibc) echo "" ;;
    replayalloc | replayalloc-off) echo "$preload" ;;
    replayalloc-before) echo "$BEFORE_LIB" ;;
    *) allocator_library "$1" ;;
  esac
}
# The environment of one allocator's runs besides LD_PRELOAD.
mode_of() { if [[ $1 == replayalloc-off ]]; then echo REPLAYALLOC_MODE=off; else echo SMALL_PATH_BENCH=1; fi; }
for a in "${allocators[@]}"; do [[ $a == glibc ]] || require_file "$(lib_of "$a")" "$a"; done
sizes="8|64|256|1024|4096"
for ((r = 0; r < rounds; ++r)); do
  n=${#allocators[@]}
  for ((k = 0; k < n; ++k)); do
    a=${allocators[$(((k + r) % n))]}
    lib=$(lib_of "$a")
    env ${lib:+LD_PRELOAD=$lib} $(mode_of "$a") \
      "$build/bench/pair_bench" --benchmark_filter="pair/(bare/($sizes)/|viaptr/($sizes)/)" --benchmark_min_time=0.05 \
      --benchmark_min_warmup_time=0.02 \
      --benchmark_format=json > "$tmp/$a.$r.json" 2> "$tmp/$a.$r.err" \
      || die "pair_bench under $a failed: $(tail -3 "$tmp/$a.$r.err")"
  done
done
for a in "${allocators[@]}"; do
  lib=$(lib_of "$a")
  for size in 8 64 256 1024 4096; do
    for kind in malloc new; do
      out="$tmp/cg.$a.$size.$kind"
      arg=(malloc)
      [[ $kind == new ]] && arg=(new)
      env ${lib:+LD_PRELOAD=$lib} $(mode_of "$a") REPLAYALLOC_BACKGROUND_PLANNING=0 \
        valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" \
        "$build/bench/preload_callgrind" "$size" 256 1000 "${arg[@]}" unmarked > "$out.log" 2>&1 \
        || die "preload_callgrind under $a failed: $(tail -3 "$out.log")"
      ir=$(grep -m1 '^summary:' "$out" | awk '{print $2}')
      echo "$a $size $kind $ir" >> "$tmp/cg.tsv"
    done
  done
done
# The loop alone (two empty out-of-line functions), as run_micro.sh measures it.
valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$tmp/cg.base" \
  "$build/bench/hotpath_callgrind" baseline 64 256 1000 pairs > /dev/null 2>&1 || true
base=$(grep -m1 '^summary:' "$tmp/cg.base" 2> /dev/null | awk '{print $2}')
echo "load_after=$(load_average)" >> "$tmp/meta"
python3 - "$tmp" "$rounds" "${base:-0}" "${BEFORE_LIB:+BEFORE_LIB=$BEFORE_LIB }bench/run_small_path.sh${1:+ $1}" \
  "${BEFORE_LIB:-}" > "$tmp/section" <<'PY'
import collections, glob, json, os, statistics, sys
tmp, rounds, base, cmd, before = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(tmp, "meta")) if "=" in l)
allocs = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "replayalloc", "replayalloc-off"] + (["replayalloc-before"] if before else [])
GP = allocs[:4]
ns = collections.defaultdict(list)
viaptr = collections.defaultdict(list)  # the same pairs with malloc and free called through pointers
for a in allocs:
    for path in glob.glob(os.path.join(tmp, f"{a}.*.json")):
        for b in json.load(open(path))["benchmarks"]:
            parts = b["name"].split("/")  # pair/VARIANT/SIZE/threads:T
            key = (a, int(parts[2]), int(parts[3].split(":")[1]))
            (ns if parts[1] == "bare" else viaptr)[key].append(b["per_pair"] * 1e9 if b["per_pair"] < 1e-3 else b["per_pair"])
cg = {}
for line in open(os.path.join(tmp, "cg.tsv")):
    a, size, kind, ir = line.split()
    cg[(a, int(size), kind)] = int(ir) / (256 * 1000)
print("## Small path: requests below the minimum size (issue 34, part 4)")
print()
print(f"- Date: {meta.get('date')}; machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}; "
      f"load {meta.get('load_before')} before, {meta.get('load_after')} after; commit {meta.get('commit')}")
print(f"- Command: `{cmd}`: {rounds} rounds of `bench/micro/pair_bench` (bare pairs `p = malloc(size); free(p)`, 256 per "
      "benchmark iteration, after 20 ms unmeasured) per allocator, each in a process of its own, the order rotated each round; then one run of "
      "`bench/micro/preload_callgrind SIZE 256 100 [new]` per allocator and size under callgrind (malloc/free, and "
      "operator new/sized delete).")
print("- **replayalloc**: `libreplayalloc_preload.so` preloaded with its defaults (auto mode, REPLAYALLOC_MIN_SIZE 4 KiB), "
      "as an unmodified program gets it: below 4 KiB every request goes to its fallback, jemalloc; 4 KiB pairs are at the "
      "minimum, so auto mode watches them (and may replay them). **replayalloc-off**: the same library with "
      "REPLAYALLOC_MODE=off, the interposition alone." +
      (f" **replayalloc-before**: the preload library `{before}` (an earlier build) with its defaults." if before else ""))
print("- CPU ns per pair: one thread's CPU time per pair (pair_bench's `per_pair`), median over the rounds; **÷ best**: "
      "replayalloc's over the lowest of glibc, jemalloc, tcmalloc and mimalloc for that row.")
print()
# One table of CPU ns per pair: data[(allocator, size, threads)], at `t` threads (with
# replayalloc-before's ratio where `with_before`).
def ns_table(data, t, with_before):
    extra = " replayalloc-before ÷ best |" if with_before else ""
    print("| size | " + " | ".join(allocs) + " | replayalloc ÷ best | replayalloc ÷ jemalloc |" + extra)
    print("|---:|" + "---:|" * (len(allocs) + 2 + (1 if with_before else 0)))
    for size in (8, 64, 256, 1024, 4096):
        m = {a: statistics.median(data[(a, size, t)]) if data[(a, size, t)] else float("nan") for a in allocs}
        best = min(m[a] for a in GP)
        print(f"| {size} B | " + " | ".join(f"{m[a]:.2f}" for a in allocs) +
              f" | {m['replayalloc'] / best:.2f} | {m['replayalloc'] / m['jemalloc']:.2f} |" +
              (f" {m['replayalloc-before'] / best:.2f} |" if with_before else ""))
    print()
for t in (1, 2, 4):
    print(f"**{t} thread{'s' if t > 1 else ''}** (CPU ns per pair)")
    print()
    ns_table(ns, t, bool(before))
print("**1 thread, malloc and free called through pointers** (CPU ns per pair; pair_bench's `viaptr`: the pointers "
      "found with dlsym, as a program built with -fno-plt calls them, no PLT jump before each call)")
print()
ns_table(viaptr, 1, False)
print(f"**Instructions per pair** (callgrind, user space; the benchmark loop's {base / 256000:.1f} included)")
print()
print("| size | call | " + " | ".join(allocs) + " | replayalloc ÷ best |")
print("|---:|---|" + "---:|" * (len(allocs) + 1))
for size in (8, 64, 256, 1024, 4096):
    for kind in ("malloc", "new"):
        m = {a: cg.get((a, size, kind), float("nan")) for a in allocs}
        best = min(m[a] for a in GP)
        label = "malloc/free" if kind == "malloc" else "new/delete(size)"
        print(f"| {size} B | {label} | " + " | ".join(f"{m[a]:.1f}" for a in allocs) + f" | {m['replayalloc'] / best:.2f} |")
print()
PY
cat "$tmp/section"
update_results text "$root/bench/RESULTS.md" --name "${RESULTS_SECTION:-small-path}" --body "$tmp/section"
