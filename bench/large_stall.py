#!/usr/bin/env python3
"""How long one large request stalls the other clients of Respite's worker.

Usage: bench/large_stall.py RESPITE_BIN MIB MODE

Starts two redis-servers and Respite with one worker (ketama over both), then a probe client
GETs a small key in a loop for 6 s while, 0.5 s in, another client sends one large request
of MIB MiB values. MODE is the request:

  set      SET ka <v>
  mset     MSET ka <v> kb <v>          (keys on the two backends: split)
  mset1    MSET ka <v> ka <v>          (two values in one request on one backend)
  multi    MULTI, SET ka <v>, EXEC     (pipelined)
  rewrite  SET rw:ka <v> on a route with remove_prefix
  multirw  MULTI, SET rw:ka <v>, EXEC  (pipelined, on the route with remove_prefix)
  routes   MSET rw:ka <v> kb <v>       (keys on two routes, one rewriting: split)

Prints the large request's reply and time, the probe's count, p99 and longest wait, and
Respite's RSS at start and at its sampled peak. Ports 47011-47014 must be free.
"""
import os
import socket
import subprocess
import sys
import threading
import time

RB, MIB, MODE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
DIR = "/tmp/respite-large-stall"
os.makedirs(DIR, exist_ok=True)
backends = [47011, 47012]
port, admin = 47013, 47014
for p in backends:
    subprocess.run(["redis-server", "--port", str(p), "--save", "", "--appendonly", "no",
                    "--daemonize", "yes", "--logfile", f"{DIR}/r{p}.log"], check=True)
time.sleep(0.3)
route = ""
if MODE in ("rewrite", "multirw", "routes"):
    route = ('[[listeners.prefix_routes.routes]]\nprefix = "rw:"\nremove_prefix = true\n'
             'cluster = "cache"\n')
with open(f"{DIR}/respite.toml", "w") as f:
    f.write(f"""[admin]
address = "127.0.0.1:{admin}"
[runtime]
workers = 1
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
op_timeout = "5s"
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
{route}
[[clusters]]
name = "cache"
lb_policy = "ketama"
hosts = ["127.0.0.1:{backends[0]}", "127.0.0.1:{backends[1]}"]
""")
proc = subprocess.Popen([RB, "--config", f"{DIR}/respite.toml"],
                        stdout=open(f"{DIR}/respite.log", "w"), stderr=subprocess.STDOUT)
time.sleep(0.5)


def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def roundtrip(s, req):
    s.sendall(req)
    return s.recv(1000)


def rss_mib():
    with open(f"/proc/{proc.pid}/status") as f:
        line = next(l for l in f if l.startswith("VmRSS"))
    return int(line.split()[1]) // 1024


try:
    probe = socket.create_connection(("127.0.0.1", port))
    probe.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    direct = [socket.create_connection(("127.0.0.1", p)) for p in backends]
    owner = {}
    for i in range(100):
        k = f"k{i}"
        roundtrip(probe, cmd("SET", k, "1"))
        for j, s in enumerate(direct):
            if roundtrip(s, cmd("EXISTS", k)) == b":1\r\n":
                owner.setdefault(j, k)
    ka, kb = owner[0], owner[1]
    roundtrip(probe, cmd("SET", "small", "s"))
    value = b"v" * (MIB << 20)
    request, replies = {
        "set": (cmd("SET", ka, value), 1),
        "mset": (cmd("MSET", ka, value, kb, value), 1),
        "mset1": (cmd("MSET", ka, value, ka, value), 1),
        "multi": (cmd("MULTI") + cmd("SET", ka, value) + cmd("EXEC"), 4),
        "rewrite": (cmd("SET", "rw:" + ka, value), 1),
        "multirw": (cmd("MULTI") + cmd("SET", "rw:" + ka, value) + cmd("EXEC"), 4),
        "routes": (cmd("MSET", "rw:" + ka, value, kb, value), 1),
    }[MODE]
    base = rss_mib()
    peak = base
    done = []

    def large():
        s = socket.create_connection(("127.0.0.1", port))
        t = time.time()
        s.sendall(request)
        r = b""
        while r.count(b"\r\n") < replies:
            r += s.recv(100)
        done.append((r, round(time.time() - t, 2)))

    waits = []
    t0 = time.time()
    sender = threading.Thread(target=large)
    started = False
    while time.time() - t0 < 6:
        if not started and time.time() - t0 > 0.5:
            sender.start()
            started = True
        a = time.time()
        probe.sendall(cmd("GET", "small"))
        probe.recv(100)
        waits.append(time.time() - a)
        if len(waits) % 50 == 0:
            peak = max(peak, rss_mib())
    sender.join()
    waits.sort()
    print(f"{os.path.basename(RB)} {MODE} {MIB} MiB: reply and time {done}; probe {len(waits)} "
          f"GETs, p99 {waits[int(len(waits) * .99)] * 1e3:.1f} ms, "
          f"max {waits[-1] * 1e3:.1f} ms; RSS {base} MiB, peak {peak} MiB")
finally:
    proc.terminate()
    proc.wait()
    for p in backends:
        subprocess.run(["redis-cli", "-p", str(p), "shutdown", "nosave"], capture_output=True)
