"""bench/serving/load.py: a closed-loop load generator for server.py (issue 34, part 6).

CONNECTIONS client threads, each sending requests one after another, every request on a
new connection (so that the server's pool threads take turns with each client's
requests); sequence lengths, for a model that takes them, drawn per request from a fixed
seed (16..256 tokens). The first WARMUP requests of each client are not timed; then each
client sends requests for SECONDS. Prints one JSON line: requests per second, p50 and
p99 latency (ms) over every timed request, and the digest of the reply to each length
(the same for every allocator when outputs are identical).
Usage: load.py PORT CONNECTIONS WARMUP SECONDS [--varlen]
"""
import http.client
import json
import random
import sys
import threading
import time

port, conns, warmup, seconds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
varlen = "--varlen" in sys.argv[5:]
latencies = [[] for _ in range(conns)]
replies = [{} for _ in range(conns)]
errors = [0] * conns
barrier = threading.Barrier(conns + 1)
deadline = [0.0]


def request(length):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"length": length})
    c.request("POST", "/infer", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}")
    return json.loads(data)["digest"]


def client(k):
    rng = random.Random(1000 + k)
    draw = (lambda: 16 * rng.randint(1, 16)) if varlen else (lambda: 0)  # noqa: E731
    for _ in range(warmup):
        length = draw()
        replies[k].setdefault(length, request(length))
    barrier.wait()
    while time.perf_counter() < deadline[0]:
        length = draw()
        t0 = time.perf_counter()
        try:
            d = request(length)
        except Exception:  # noqa: BLE001 (counted, the run's line says how many)
            errors[k] += 1
            continue
        latencies[k].append(time.perf_counter() - t0)
        if replies[k].setdefault(length, d) != d:
            errors[k] += 1  # another output for the same input: counted as an error


threads = [threading.Thread(target=client, args=(k,)) for k in range(conns)]
for t in threads:
    t.start()
deadline[0] = time.perf_counter() + 3600
barrier.wait()
t0 = time.perf_counter()
deadline[0] = t0 + seconds
for t in threads:
    t.join()
wall = time.perf_counter() - t0
lat = sorted(x for xs in latencies for x in xs)
merged = {}
for r in replies:
    for length, d in r.items():
        if merged.setdefault(length, d) != d:
            errors[0] += 1
print(json.dumps({"requests_per_s": len(lat) / wall, "p50_ms": 1e3 * lat[len(lat) // 2] if lat else None,
                  "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None,
                  "requests": len(lat), "errors": sum(errors), "outputs": {str(k): v for k, v in merged.items()}}))
