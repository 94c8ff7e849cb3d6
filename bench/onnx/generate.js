// bench/onnx/generate.js: greedy LLM generation through ONNX Runtime (onnxruntime-node,
// CPU), the second framework of bench/run_onnx_generation.sh. Nothing is marked: the
// allocator under test sees ONNX Runtime's own allocations only.
//
// Each of T sessions (one ONNX Runtime InferenceSession each, one intra-op thread)
// runs requests of a prompt and a generation of 8..64 tokens each, drawn per request
// from a fixed seed: the prefill, then one decode step per token, feeding the
// key/value cache back (present_i -> past_i) as ONNX Runtime's GPT-2 examples do.
// The sessions run at once (ONNX Runtime's run() is asynchronous).
//
// Usage: node generate.js MODEL.onnx [--sessions T] [--warmup N] [--requests N]
//        [--arena on|off] [--layers 4] [--heads 4] [--hidden 256] [--callgrind]
// --callgrind: under `valgrind --tool=callgrind --instr-atstart=no`, instruments the timed
// requests only (callgrind_control turns instrumentation on when every session is warm
// and off when the last timed request ends), as e2e_driver's --callgrind-timed does.
// Prints one JSON line: tokens/s over the timed requests of all sessions, the p50/p99
// of the time per token, the tokens' checksum (identical under every allocator), page
// faults and system CPU time per token, peak RSS and RSS as the timed phase ends.
'use strict';
const ort = require('onnxruntime-node');

function arg(name, dflt) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : dflt;
}
const model = process.argv[2];
const sessions = +arg('sessions', 1), warmup = +arg('warmup', 20), requests = +arg('requests', 60);
const arena = arg('arena', 'off') === 'on';
const layers = +arg('layers', 4), heads = +arg('heads', 4), hidden = +arg('hidden', 256);
const headDim = hidden / heads;
const callgrind = process.argv.includes('--callgrind');

// callgrind_control's request is taken only while the program runs (not while it waits
// in a system call): the main thread spins until callgrind_control has answered, which
// the flag file says (not under callgrind: an error, not a silent count of nothing).
function instrument(on) {
  if (!callgrind) return;
  const fs = require('fs'), os = require('os'), path = require('path');
  const flag = path.join(os.tmpdir(), `generate-${process.pid}-${on ? 'on' : 'off'}`);
  fs.rmSync(flag, {force: true});
  // callgrind_control exits 0 even where it finds no such process: its "Error:" says so.
  require('child_process').spawn('sh', ['-c', `if callgrind_control -i ${on ? 'on' : 'off'} ${process.pid} 2>&1 | ` +
                                 `grep -q '^Error'; then s=1; else s=0; fi; echo $s > ${flag}.tmp && mv ${flag}.tmp ${flag}`],
                                 {stdio: 'ignore', detached: true}).unref();
  while (!fs.existsSync(flag)) for (let i = 0; i < 1e4; i++);
  const status = fs.readFileSync(flag, 'utf8').trim();
  fs.rmSync(flag, {force: true});
  if (status !== '0') throw new Error(`--callgrind: callgrind_control -i ${on ? 'on' : 'off'} found no callgrind run ` +
                                      `of this process (${process.pid}): not under valgrind --tool=callgrind?`);
}

// A small deterministic generator (mulberry32), so that every allocator runs the same requests.
function rng(seed) {
  return () => {
    seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function argmax(a) {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
}

async function request(session, prompt, steps) {
  let feeds = {ids: new ort.Tensor('int64', BigInt64Array.from(prompt, BigInt), [1, prompt.length])};
  for (let l = 0; l < layers; l++)
    feeds['past_' + l] = new ort.Tensor('float32', new Float32Array(0), [2, 1, heads, 0, headDim]);
  const out = [];
  for (let s = 0; s < steps; s++) {
    const r = await session.run(feeds);
    const token = argmax(r.logits.data);
    out.push(token);
    feeds = {ids: new ort.Tensor('int64', BigInt64Array.of(BigInt(token)), [1, 1])};
    for (let l = 0; l < layers; l++) feeds['past_' + l] = r['present_' + l];
  }
  return out;
}

async function worker(index, timings) {
  const options = {intraOpNumThreads: 1, interOpNumThreads: 1, enableCpuMemArena: arena,
                   enableMemPattern: arena, executionMode: 'sequential'};
  const session = await ort.InferenceSession.create(model, options);
  const draw = rng(1234 + index);
  let checksum = 0, tokens = 0;
  for (let q = 0; q < warmup + requests; q++) {
    const plen = 8 + Math.floor(draw() * 57), steps = 8 + Math.floor(draw() * 57);
    const prompt = Array.from({length: plen}, () => Math.floor(draw() * 8000));
    const t0 = process.hrtime.bigint();
    const out = await request(session, prompt, steps);
    const us = Number(process.hrtime.bigint() - t0) / 1000;
    for (const t of out) checksum = (checksum * 31 + t) % 1000000007;
    if (q >= warmup) {
      tokens += out.length;
      timings.push(us / out.length);
    }
    if (q + 1 === warmup) await barrier(index);
  }
  return {checksum, tokens};
}

// The timed phase starts when every session has finished its warm-up.
let waiting = 0, release, started;
const allWarm = new Promise((r) => { release = r; });
function barrier() {
  if (++waiting === sessions) {
    instrument(true);
    started = {t: process.hrtime.bigint(), usage: process.resourceUsage()};
    release();
  }
  return allWarm;
}

(async () => {
  const timings = [];
  const results = await Promise.all(Array.from({length: sessions}, (_, i) => worker(i, timings)));
  const seconds = Number(process.hrtime.bigint() - started.t) / 1e9;
  instrument(false);
  const usage = process.resourceUsage();
  const tokens = results.reduce((s, r) => s + r.tokens, 0);
  timings.sort((a, b) => a - b);
  const pct = (p) => timings[Math.min(timings.length - 1, Math.floor(p * timings.length))];
  console.log(JSON.stringify({
    sessions, arena, tokens,
    tokens_per_s: tokens / seconds,
    p50_us_per_token: pct(0.5), p99_us_per_token: pct(0.99),
    faults_per_token: (usage.minorPageFault - started.usage.minorPageFault) / tokens,
    sys_us_per_token: (usage.systemCPUTime - started.usage.systemCPUTime) / tokens,
    user_us_per_token: (usage.userCPUTime - started.usage.userCPUTime) / tokens,
    peak_rss_kib: usage.maxRSS,
    end_rss_kib: Math.round(process.memoryUsage().rss / 1024),  // resident as the timed phase ends
    checksum: results.map((r) => r.checksum).join('-'),
  }));
})().catch((e) => { console.error(e); process.exit(1); });
