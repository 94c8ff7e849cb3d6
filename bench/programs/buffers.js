// Node.js: 60,000 Buffers of 1-65 KiB made with Buffer.alloc (a zero-filled ArrayBuffer,
// which Node's allocator callocs outside V8's heap), each written at both ends, 512 live
// at a time, the oldest dropped for the collector to free (bench/programs/measure.py).
// Prints the sum of the dropped Buffers' first bytes, the same under every allocator.
let s = 1, sum = 0;
const win = [];
for (let i = 0; i < 60000; i++) {
  s = (s * 1103515245 + 12345) & 0x7fffffff;
  const b = Buffer.alloc(1024 + (s % 65536));
  b[0] = i & 255;
  b[b.length - 1] = 7;
  win.push(b);
  if (win.length > 512) sum += win.shift()[0];
}
console.log(sum);
