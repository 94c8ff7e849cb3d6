#!/usr/bin/env bash
# On a machine with PyTorch 2.x (the GPU machine's torch wheel): builds the libtorch CPU
# integration against that torch's own headers and libraries (the dlopen build of the
# core, with the Abseil headers and libraries that bench/gpu/prepare.sh carries in
# .gpu/), then runs the Python package's install_cpu() on torchvision ResNet-50 and
# checks outputs bit for bit against torch's own allocator.
set -euo pipefail
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$root"
# The carried Abseil libraries depend on each other: the loader finds them by path.
export LD_LIBRARY_PATH="$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}"
PY=$(torch_python python3 /usr/bin/python3)  # the image's torch 2.x, not Debian's 1.13
TORCH=$("$PY" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
echo "torch $("$PY" -c 'import torch; print(torch.__version__)') at $TORCH"
b=$(mktemp -d)
flags="-std=c++20 -O2 -fPIC -fvisibility=hidden -DREPLAYALLOC_DLOPEN=1 -Iallocator -Iallocator/include -I.gpu/include"
srcs="allocator/support/*.cc allocator/backend/libc_backend.cc allocator/backend/slab_range.cc allocator/trace/*.cc allocator/planner/*.cc allocator/replay/*.cc allocator/runtime/*.cc"
for f in $srcs; do g++ $flags -c "$f" -o "$b/$(basename "$f").o" & done; wait
g++ $flags -I"$TORCH/include" -I"$TORCH/include/torch/csrc/api/include" -Iintegrations/pytorch/cpu/include \
  -c integrations/pytorch/cpu/torch_allocator.cc -o "$b/torch_allocator.o"
g++ -shared -o "$b/libreplayalloc_torch.so" "$b"/*.o -L.gpu/lib -Wl,-rpath,"$PWD/.gpu/lib" \
  $(ls .gpu/lib | sed -n 's/^lib\(absl_[a-z0-9_]*\)\.so.*/-l:lib\1.so.20220623/p' | sort -u) \
  -L"$TORCH/lib" -Wl,-rpath,"$TORCH/lib" -ltorch_cpu -lc10
echo "built $b/libreplayalloc_torch.so against torch 2.x"
PYTHONPATH=integrations/pytorch/python:scripts "$PY" - "$b/libreplayalloc_torch.so" <<'PY'
import sys, torch, models, replayalloc, replayalloc.torch as rt
m, x = models.build("resnet50", 1)
with torch.no_grad(): ref = m(x)
replayalloc.load(sys.argv[1]); rt.install_cpu()
with torch.no_grad():
    for i in range(6):
        with rt.iteration("resnet50/cpu"):
            y = m(x)
        assert torch.equal(y, ref), f"iteration {i} differs"
s = rt.stats()
print(f"torch {torch.__version__}: install_cpu ok, outputs bit-identical, slab_hits {s['slab_hits']}, fallbacks {s['fallbacks']}, plans {s['plans']}")
PY
