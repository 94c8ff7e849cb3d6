"""bench/serving/server.py: a thread-pool HTTP inference service (issue 34, part 6).

Python's standard library HTTP server with a fixed pool of worker threads: each
connection is handed to a free pool thread, and the load generator (load.py) opens a new
connection per request, so a client's requests hop between the pool's threads as they do
in a pooled service. A request is POST /infer with a JSON body {"length": L} (L ignored
for a fixed-shape model); the reply is a JSON object with a digest of the output, so the
load generator can check that every allocator computes the same thing. One intra-op
thread per worker. The allocator is whatever serves malloc in this process
(LD_PRELOAD), or, with --replay-torch LIB, replayalloc as libtorch's CPU allocator with
one iteration per request (one key per model). Prints "port N" once listening; at
SIGTERM or SIGINT it prints one JSON line (peak RSS, replayalloc's statistics when
loaded) and exits.
Usage: server.py --model MODEL.pt --input INPUT.pt [--workers W] [--replay-torch LIB]
"""
import argparse
import ctypes
import hashlib
import http.server
import json
import os
import queue
import resource
import signal
import sys
import threading

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--input", required=True)
ap.add_argument("--workers", type=int, default=4)
ap.add_argument("--replay-torch", metavar="LIB")
a = ap.parse_args()
torch.set_num_threads(1)
model = torch.jit.load(a.model).eval()
example = torch.jit.load(a.input).forward()
varlen = example.dtype in (torch.int64, torch.int32) and example.dim() == 2
stats_fn = getattr(ctypes.CDLL(None), "replayalloc_stats_json", None)
step = None
if a.replay_torch:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "integrations", "pytorch", "python"))
    import replayalloc
    import replayalloc.torch as rt
    stats_fn = replayalloc.load(a.replay_torch).replayalloc_stats_json
    rt.install_cpu()
    key = "serve/" + os.path.basename(a.model)
    step = lambda: rt.iteration(key)  # noqa: E731


def infer(length):
    x = example[:, :max(1, min(length, example.shape[1]))] if varlen else example
    with torch.no_grad():
        if step is not None:
            with step():
                y = model(x)
        else:
            y = model(x)
    y = y[0] if isinstance(y, (tuple, list)) else y
    return hashlib.sha256(y.contiguous().numpy().tobytes()).hexdigest()[:16]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_POST(self):  # noqa: N802 (the standard library's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        length = json.loads(body or b"{}").get("length", 0)
        reply = json.dumps({"digest": infer(int(length)), "length": int(length)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


class PooledServer(http.server.HTTPServer):
    """Each accepted connection goes to a free thread of a fixed pool."""
    request_queue_size = 64

    def __init__(self, addr, handler, workers):
        super().__init__(addr, handler)
        self.jobs = queue.Queue()
        for _ in range(workers):
            threading.Thread(target=self.work, daemon=True).start()

    def work(self):
        torch.set_num_threads(1)
        while True:
            request, client = self.jobs.get()
            try:
                self.finish_request(request, client)
            except Exception:  # noqa: BLE001 (a broken connection ends that request only)
                self.handle_error(request, client)
            finally:
                self.shutdown_request(request)

    def process_request(self, request, client):
        self.jobs.put((request, client))


server = PooledServer(("127.0.0.1", 0), Handler, a.workers)


def stop(*_):
    threading.Thread(target=server.shutdown, daemon=True).start()


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
print("port", server.server_address[1], flush=True)
server.serve_forever()
stats = None
if stats_fn is not None:
    stats_fn.restype = ctypes.c_size_t
    buf = ctypes.create_string_buffer(16384)
    stats_fn(buf, 16384)
    stats = json.loads(buf.value.decode())
print(json.dumps({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "replayalloc": stats}), flush=True)
