#!/usr/bin/env bash
# bench/run_planning_latency.sh: what the first iterations of a key cost (issue 30):
# the two recorded ones (the second's end makes the plan: inside it when planning is
# synchronous, queued for the planner thread when it is in the background, Note
# [Background planning]), the one after, and the rest, against the same iteration
# under jemalloc alone. Runs bench/micro/planning_latency.cc (LLM requests of
# ALLOCATIONS allocations each) for each ALLOCATIONS under jemalloc and replayalloc
# preloaded, synchronous (REPLAYALLOC_BACKGROUND_PLANNING=0) and background (the
# default), each with and without call-stack tags (REPLAYALLOC_STACK_DEPTH=0), one
# process per mode, size and round, the order rotated every round; rewrites the
# "planning-latency" section of bench/RESULTS.md with the medians over the rounds.
# Goal (issue 30): no iteration over 3x jemalloc's, the recorded ones included.
# Usage: bench/run_planning_latency.sh [ROUNDS] [ALLOCATIONS...]
#   (default 5 rounds; 10000 60000 100000 allocations per iteration)
# Environment: BUILD_DIR (default <repo>/build); ITERATIONS (default 12).
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
rounds=${1:-5}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 60000 100000)
iterations=${ITERATIONS:-12}
steady=4  # the last iterations, whose median is the steady state
envs_used=
[[ $iterations == 12 ]] || envs_used="ITERATIONS=$iterations "
cmake --build "$build" --target planning_latency replayalloc_preload > /dev/null
prog=$build/bench/planning_latency
pre=$(preload_library "$build")
names=(jemalloc sync background sync-no-stack background-no-stack)
run_one() {  # name allocations -> the program's output
  local envs=()
  case $1 in
    jemalloc) envs=("LD_PRELOAD=$(allocator_library jemalloc)") ;;
    sync) envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0 REPLAYALLOC_BACKGROUND_PLANNING=0) ;;
    background) envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0) ;;
    sync-no-stack)
      envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0 REPLAYALLOC_BACKGROUND_PLANNING=0 REPLAYALLOC_STACK_DEPTH=0) ;;
    background-no-stack) envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0 REPLAYALLOC_STACK_DEPTH=0) ;;
  esac
  env "${envs[@]}" "$prog" "$2" "$iterations"
}
stat_of() {  # key < stats lines -> the values over the rounds, distinct, "a/b"
  sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" | sort -n | uniq | paste -sd/
}
scratch_dir
load_before=$(load_average)
start=$SECONDS
for ((r = 0; r < rounds; ++r)); do
  for n in "${sizes[@]}"; do
    k=${#names[@]}
    for ((j = 0; j < k; ++j)); do
      name=${names[$(((j + r) % k))]}
      out=$(run_one "$name" "$n")
      # "iteration I us T" -> "I T", one line per iteration, appended over the rounds
      sed -n 's/^iteration \([0-9]*\) us \([0-9]*\)$/\1 \2/p' <<<"$out" >> "$tmp/$name.$n"
      sed -n 's/^stats //p' <<<"$out" >> "$tmp/$name.$n.stats"
    done
  done
done
minutes=$(( (SECONDS - start + 30) / 60 ))
# Median over the rounds of each iteration: "I us", I = 1..iterations.
for name in "${names[@]}"; do
  for n in "${sizes[@]}"; do
    for ((i = 1; i <= iterations; ++i)); do
      echo "$i $(awk -v i="$i" '$1 == i { print $2 }' "$tmp/$name.$n" | median)"
    done > "$tmp/$name.$n.med"
  done
done
{
  echo "## Planning latency: the recorded iterations and the one after, against jemalloc"
  echo
  echo "$(utc_now), $(nproc) cores ($(cpu_model)), load before $load_before, after $(load_average); commit $(source_commit); about $minutes minutes."
  echo "Command: \`${envs_used}bench/run_planning_latency.sh $rounds ${sizes[*]}\` ($rounds rounds of $iterations iterations, one process per mode, size and round, order rotated)."
  echo "What runs: \`bench/micro/planning_latency.cc\`: every iteration one LLM request of N allocations, the same in every iteration (a prefill of 32 tokens, then decode steps of 12 layers × 20 allocations + 4; hidden states of 4 KiB, FFN blocks of 16 KiB, scores and K/V caches that grow with the position, the caches concatenated every step and living across steps, a few blocks under 4 KiB; one byte written per 4 KiB page, no compute), marked with \`replayalloc_iteration_begin/end\` of one key (dlsym). Nothing calls \`replayalloc_wait_plans\`: the figures are what a request sees. Modes: **jemalloc** alone (\`LD_PRELOAD\`); replayalloc preloaded (defaults: 2 recordings, call-stack tags of 4 frames, 4 KiB minimum size, the \`best\` planner), **sync** (\`REPLAYALLOC_BACKGROUND_PLANNING=0\`: the plan made inside iteration 2's end) and **background** (the default: iteration 2's end queues the plan for the planner thread; iterations pass through to jemalloc until it is installed), each also with \`REPLAYALLOC_STACK_DEPTH=0\` (**no-stack**: no call-stack tags)."
  echo "Each iteration's wall time (steady_clock, begin and end included), median over the rounds, divided by jemalloc's median for the same iteration; **it 1**, **it 2**: the recorded ones (2 ends with the plan), **it 3**: the next; **worst**: the highest ratio over all $iterations iterations (and which); **steady**: the median of the last $steady ratios. Goal (issue 30): no iteration above 3.00. **awaiting plan**: iterations that passed through to jemalloc while their plan was being made (\`iterations_awaiting_plan\`); **background plans**: plans made by the planner thread (\`plans_background\`); values over the rounds, distinct ones separated by /. This machine has $(nproc) cores, shared: the planner thread competes with the request's thread for them."
  echo
  echo "| N | mode | it 1 ms | it 2 ms | it 3 ms | it 1 ÷ je | it 2 ÷ je | it 3 ÷ je | worst ÷ je (it) | steady ÷ je | goal ≤ 3× | awaiting plan | background plans | plans |"
  echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"
  for n in "${sizes[@]}"; do
    for name in "${names[@]}"; do
      row=$(paste -d' ' "$tmp/$name.$n.med" "$tmp/jemalloc.$n.med" | awk -v steady="$steady" -v n="$iterations" '
        { t[$1] = $2; r[$1] = $2 / $4; if (r[$1] > worst) { worst = r[$1]; at = $1 } }
        END {
          m = 0; for (i = n - steady + 1; i <= n; ++i) s[++m] = r[i]
          for (i = 2; i <= m; ++i) for (j = i; j > 1 && s[j - 1] > s[j]; --j) { x = s[j]; s[j] = s[j - 1]; s[j - 1] = x }
          st = (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
          printf "%.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f (%d) | %.2f | %s",
            t[1] / 1000, t[2] / 1000, t[3] / 1000, r[1], r[2], r[3], worst, at, st, (worst <= 3) ? "met" : "**not met**"
        }')
      if [[ $name == jemalloc ]]; then
        echo "| $n | $name | $row | - | - | - |" | sed 's/| met |/| - |/'
      else
        s=$tmp/$name.$n.stats
        echo "| $n | $name | $row | $(stat_of iterations_awaiting_plan < "$s") | $(stat_of plans_background < "$s") | $(stat_of plans < "$s") |"
      fi
    done
  done
  echo
} > "$tmp/section"
cat "$tmp/section"
update_results text "$results" --name planning-latency --body "$tmp/section"
