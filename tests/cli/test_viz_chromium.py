"""The viz page, rendered by headless Chromium (Debian's chromium).

Makes a plan page with `replayalloc viz`, loads it in headless Chromium with --dump-dom
(the DOM after its inline script ran) and checks that the page rendered: one <rect> per
planned block inside #blocks, the lower-bound line, the script's own mark that it found
as many blocks as its data describes (data-rendered), and no script error (data-error).
Then takes a screenshot and checks it is a real, non-blank PNG.
Exits 77 (ctest: skipped) with the reason when no Chromium is installed.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

CLI = os.environ.get("REPLAYALLOC_CLI", "")
CHROMIUM = next((c for c in ("/usr/bin/chromium", shutil.which("chromium") or "",
                             shutil.which("chromium-browser") or "") if c and os.access(c, os.X_OK)), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
         "--no-first-run", "--disable-extensions"]


def chain_trace(layers):
    rows, at, prev = [], 0, None
    ops = ("aten::conv2d", "aten::batch_norm", "aten::relu", "aten::add")
    for l in range(layers):
        op = ops[l % len(ops)]
        rows.append([len(rows), 4096 + 64 * (l % 7), 64, at, at + 1, op])
        at += 2
        rows.append([len(rows), 1000 * (1 + l % 13), 64, at, None, op])
        at += 1
        if prev is not None:
            prev[4] = at
            at += 1
        prev = rows[-1]
    return "id,size,align,alloc_at,free_at,op\n" + "".join(
        ",".join("" if x is None else str(x) for x in r) + "\n" for r in rows)


def main():
    if not CHROMIUM:
        print("SKIP: no chromium installed (apt install chromium, or scripts/setup.sh)")
        return 77
    if not CLI or not os.access(CLI, os.X_OK):
        print("FAIL: REPLAYALLOC_CLI does not name the built replayalloc program")
        return 1
    failures = []
    with tempfile.TemporaryDirectory() as d:
        for layers in (40, 2500):  # a small page, and one of 5000 blocks
            trace = os.path.join(d, f"t{layers}.csv")
            with open(trace, "w") as f:
                f.write(chain_trace(layers))
            page = os.path.join(d, f"t{layers}.html")
            subprocess.run([CLI, "viz", trace, "-o", page], check=True, capture_output=True)
            expected = 2 * layers - 1  # the last activation outlives the iteration
            dom = subprocess.run([CHROMIUM, *FLAGS, "--virtual-time-budget=5000", "--dump-dom",
                                  "file://" + page], capture_output=True, text=True, timeout=120).stdout
            blocks = re.search(r'<g id="blocks">(.*?)</g>', dom, re.S)
            n = len(re.findall(r"<rect\b", blocks.group(1))) if blocks else -1
            mark = re.search(r'data-rendered="(-?\d+)"', dom)
            error = re.search(r'data-error="([^"]*)"', dom)
            checks = [(n == expected, f"{n} blocks in the DOM, expected {expected}"),
                      (mark is not None and int(mark.group(1)) == expected,
                       f"script mark {mark.group(1) if mark else 'missing'}, expected {expected}"),
                      (error is None, f"script error: {error.group(1) if error else ''}"),
                      ('id="lower-bound"' in dom, "no lower-bound line"),
                      ("data-i=" in dom, "the script did not index the blocks for hovering")]
            failures += [f"{layers} layers: {msg}" for ok, msg in checks if not ok]
            print(f"{layers} layers: {n} blocks rendered, page {os.path.getsize(page)} bytes")
        shot = os.path.join(d, "shot.png")
        subprocess.run([CHROMIUM, *FLAGS, "--window-size=1280,800", f"--screenshot={shot}",
                        "file://" + os.path.join(d, "t40.html")], capture_output=True, timeout=120)
        if not os.path.exists(shot):
            failures.append("no screenshot")
        else:
            with open(shot, "rb") as f:
                png = f.read()
            if not png.startswith(b"\x89PNG") or len(png) < 10000:
                failures.append(f"screenshot is not a real picture ({len(png)} bytes)")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
