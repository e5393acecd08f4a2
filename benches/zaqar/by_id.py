"""CPU time of Weir's Zaqar lookups by id.

    python3 benches/zaqar/by_id.py WEIR_BIN DEPTH LOOKUPS

Starts WEIR_BIN (HTTP listener only, a fresh data directory, fsync "never" so
the untimed prefill is quick), posts DEPTH messages (20 per request, ~220 B
JSON bodies) to one queue and keeps their ids, then gets LOOKUPS of them
spread evenly over the queue one by one (GET .../messages/ID) and deletes
them one by one (DELETE .../messages/ID), over one keep-alive connection.
Per phase: the broker's CPU time per request (the sum of its threads'
/proc/PID/task/*/schedstat run times over the phase), wall time, and answers
other than 200/204; then how many deleted ids still answer 200
(`not_deleted`). Past max_memory_messages (10,000 by default) messages are
paged to disk, so at depth 100,000 most lookups find a paged message.
One JSON line on stdout.
"""
import http.client, json, os, subprocess, sys, tempfile, time, socket, glob
weir, depth, lookups = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
work = tempfile.mkdtemp(prefix="zbyid")
open(f"{work}/weir.toml", "w").write('[store]\nfsync = "never"\n')
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
p = subprocess.Popen([weir, "serve", "--config", f"{work}/weir.toml", "--data-dir", f"{work}/data",
                      "--stomp", "off", "--amqp", "off", "--websocket", "off", "--http", f"127.0.0.1:{port}", "--log", "warn"])
H = {"Client-ID": "5a9a7c1e-0000-4000-8000-000000000000", "Content-Type": "application/json"}
def conn():
    for _ in range(100):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port); c.request("GET", "/v2/ping"); c.getresponse().read(); return c
        except OSError: time.sleep(0.1)
c = conn()
def req(m, path, body=None):
    c.request(m, path, body=body, headers=H); r = c.getresponse(); return r.status, r.read()
def cpu():
    return sum(int(open(t + "/schedstat").read().split()[0]) for t in glob.glob(f"/proc/{p.pid}/task/*"))
q = f"/v2/queues/byid{depth}"
ids = []
pad = "x" * 200
while len(ids) < depth:
    n = min(20, depth - len(ids))
    st, b = req("POST", q + "/messages", json.dumps({"messages": [{"ttl": 3600, "body": {"seq": len(ids) + i, "pad": pad}} for i in range(n)]}))
    assert st == 201, (st, b)
    ids += [h.rsplit("/", 1)[1] for h in json.loads(b)["resources"]]
step = max(1, len(ids) // lookups)
chosen = ids[::step][:lookups]
out = {"depth": depth, "lookups": len(chosen)}
for phase, m, ok in (("get", "GET", 200), ("delete", "DELETE", 204)):
    c0, t0 = cpu(), time.time()
    bad = 0
    for i in chosen:
        st, _ = req(m, f"{q}/messages/{i}")
        bad += st != ok
    out[phase] = {"server_cpu_us_per_req": round((cpu() - c0) / 1000 / len(chosen), 1), "wall_s": round(time.time() - t0, 2), "unexpected_status": bad}
out["not_deleted"] = sum(req("GET", f"{q}/messages/{i}")[0] == 200 for i in chosen)
print(json.dumps(out))
p.kill(); p.wait()
