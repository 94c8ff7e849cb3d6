#!/usr/bin/env bash
# The many-core CPU study (issue 15): where allocator contention exists. Runs on the GPU
# machine's host (16 cores) in one call, over what bench/gpu/prepare.sh carried in .gpu/:
#   1. builds bench/e2e/e2e_driver there against the image's own torch (its libtorch,
#      headers and C++ ABI; nothing else is needed) into .gpu/mc/bench/e2e/;
#   2. makes the TorchScript models with that torch (scripts/make_models.py);
#   3. runs bench/e2e/run_e2e.py over MODELS at T = THREADS inference threads (one
#      intra-op thread each), under glibc, jemalloc, tcmalloc and mimalloc (Debian's,
#      carried in .gpu/lib) and replayalloc's preload library in auto mode and with
#      explicit iterations, each run in a process of its own, the order rotated each
#      round; every output compared with glibc's;
#   4. writes the results section (bench/update_results.py e2e) and a plot of throughput
#      and p99 against T per allocator (bench/gpu/plot_manycore.py, when matplotlib is
#      there) to $OUT.
# Environment: MODELS (default "lstm resnet50"), THREADS (default "1 2 4 8 16"), ROUNDS
# (default 2), WARMUP (default 8), ITERS (timed inferences per thread, default 12),
# EXTRA_CONF (run_e2e.py's --extra-conf NAME=CONF, e.g. "replay-auto-percpu=percpu_arena:percpu":
# auto mode with its fallback's jemalloc arena per CPU instead of one shared arena, Note
# [The fallback's shared arena]; in manycore.jsonl, not in the section's table; adds a
# sixth of the time).
# The defaults take about 8 minutes on 16 cores; run mobilenet_v3_large and bert_b1 in
# a second call. Copy $OUT/manycore.md into bench/RESULTS.md and the PNG into bench/.
set -uo pipefail
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$root" || exit 1
PY=$(torch_python python3 /usr/bin/python3) || exit 1
OUT=${OUT:-bench/gpu/out}
MODELS=${MODELS:-lstm resnet50}
THREADS=${THREADS:-1 2 4 8 16}
ROUNDS=${ROUNDS:-2}
WARMUP=${WARMUP:-8}
ITERS=${ITERS:-12}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}"
[ -f .gpu/libreplayalloc_preload.so ] || die "run bench/gpu/prepare.sh here first (no .gpu/libreplayalloc_preload.so)"

mc=.gpu/mc
mkdir -p "$mc/bench/e2e" "$mc/hooks"
cp .gpu/libreplayalloc_preload.so "$mc/hooks/"
TORCH=$("$PY" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
ABI=$("$PY" -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))')
echo "torch $("$PY" -c 'import torch; print(torch.__version__)') at $TORCH (C++11 ABI $ABI); $(nproc) cores" | tee "$OUT/manycore_machine.txt"
lscpu | sed -n 's/^Model name: *//p' | tee -a "$OUT/manycore_machine.txt"
inc=$TORCH/include
[ -d "$inc" ] || inc=/usr/include  # Debian's torch keeps its headers there (a try-out here)
g++ -std=c++20 -O2 -D_GLIBCXX_USE_CXX11_ABI="$ABI" bench/e2e/e2e_driver.cc -o "$mc/bench/e2e/e2e_driver" \
  -I"$inc" -I"$inc/torch/csrc/api/include" \
  -L"$TORCH/lib" -Wl,-rpath,"$TORCH/lib" -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed \
  -pthread -ldl || die "e2e_driver did not build against $TORCH"

cells=""
for m in $MODELS; do
  for t in $THREADS; do cells="$cells${cells:+,}$m:$t:$WARMUP:$ITERS"; done
done
{
  echo "e2e_cmd=OUT=... MODELS=\"$MODELS\" THREADS=\"$THREADS\" ROUNDS=$ROUNDS bench/gpu/run_manycore.sh, i.e. bench/e2e/run_e2e.py --rounds $ROUNDS --libdir .gpu/lib --cells $cells"
  echo "e2e_title=many cores (the GPU machine's host: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'))"
  echo "torch_version=$("$PY" -c 'import torch; print(torch.__version__)')"
  echo "date=$(utc_now)"
  echo "nproc=$(nproc)"
  echo "cpu=$(cpu_model)"
  echo "kernel=$(uname -r)"
  echo "load_before=$(load_average)"
  echo "commit=$(cat .gpu/commit 2>/dev/null || echo unknown)"
  echo "build_type=e2e_driver built there with g++ -O2 against torch $("$PY" -c 'import torch; print(torch.__version__)')"
  echo "compiler=$(g++ --version | head -n1)"
} > "$OUT/manycore_meta.txt"
status=0
"$PY" bench/e2e/run_e2e.py --build "$mc" --out "$OUT/manycore.jsonl" --rounds "$ROUNDS" --libdir .gpu/lib \
  --allocators glibc,jemalloc,tcmalloc,mimalloc,replay-auto,replay-explicit --cells "$cells" \
  ${EXTRA_CONF:+--extra-conf "$EXTRA_CONF"} || status=$?
echo "load_after=$(load_average)" >> "$OUT/manycore_meta.txt"
cp bench/RESULTS.md "$OUT/RESULTS.manycore.md"
"$PY" bench/update_results.py e2e "$OUT/RESULTS.manycore.md" --meta "$OUT/manycore_meta.txt" \
  --e2e-runs "$OUT/manycore.jsonl" --name e2e-manycore
sed -n '/<!-- section: e2e-manycore -->/,/<!-- end: e2e-manycore -->/p' "$OUT/RESULTS.manycore.md" > "$OUT/manycore.md"
rm -f "$OUT/RESULTS.manycore.md"
cat "$OUT/manycore.md"
"$PY" bench/gpu/plot_manycore.py "$OUT/manycore.jsonl" "$OUT/manycore.png" || echo "no plot (matplotlib missing?): plot here from $OUT/manycore.jsonl"
exit $status
