# Python: 60,000 records (a string of 0-699 bytes, a list of 0-49 numbers) dumped to
# JSON and parsed back three times, a 28 MB string each way (bench/run_programs.sh).
import json

d = [{"id": i, "name": "x" * (i % 700), "vals": list(range(i % 50))} for i in range(60000)]
s = json.dumps(d)
for _ in range(3):
    e = json.loads(s)
    s = json.dumps(e)
print(len(s))
