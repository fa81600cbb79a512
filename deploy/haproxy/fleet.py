#!/usr/bin/env python3
"""A local tokenflow fleet behind Debian's haproxy (issue 25, item 3): N replicas per model, each
its own `tokenflow serve` process on 127.0.0.1, and haproxy in front that

  - routes by the body's "model" (every door's: OpenAI's, Anthropic's, Ollama's; json_query on
    the buffered body) and by TF Serving's /v1/models/NAME paths to per-model backends, so one
    model's replicas failing leaves the others serving (the configuration is render.py's, which
    also renders one for replicas on other hosts from their list);
  - health-checks every replica on /readyz and retries a request whose replica failed before
    answering (connection refused, reset, no response) on another one (`retry-on`,
    `option redispatch`): the body is buffered, so it can be sent again;
  - weighs replicas (a canary gets a share of a model's traffic);
  - sends requests that share a prompt prefix to the same replica (a consistent hash of the
    prompt's first bytes), where that prefix is already in the prefix cache.

    python3 deploy/haproxy/fleet.py --binary build/release/tokenflow \\
        --model llama=/models/llama:2 --model qwen=/models/qwen:2 [--port 8000] \\
        [--canary llama=/models/llama-v2:1:10] [--balance affinity|roundrobin]

Prints the front's URL and runs until SIGINT / SIGTERM. Tests import it (tests/deploy/
test_fleet.py) to kill, drain and restart replicas.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render  # noqa: E402  (the configuration, from the replica list)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def metric_of(replica, name):
    """A metric of one replica (summed over its label sets); 0 when it does not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % replica.port,
                                    timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    return sum(float(m.group(1)) for m in re.finditer(
        r"(?m)^%s(?:\{[^}]*\})? ([0-9.e+-]+)$" % re.escape(name), text))


class Replica:
    """One `tokenflow serve` process for one model on a fixed port."""

    def __init__(self, fleet, model, path, name, weight):
        self.fleet, self.model, self.path, self.name, self.weight = fleet, model, path, name, weight
        self.port = free_port()
        self.proc = None
        self.log = None

    def start(self):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [self.fleet.binary, "serve", "--model", "%s=%s" % (self.model, self.path),
             "--port", str(self.port), "--shutdown-timeout", "30", *self.fleet.replica_args],
            stdout=subprocess.DEVNULL, stderr=self.log)

    def wait_ready(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError("replica %s exited: %s" % (self.name, self.log.read()[-2000:]))
            if http_status("http://127.0.0.1:%d/readyz" % self.port) == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("replica %s not ready in %d s" % (self.name, timeout))

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)

    def wait(self, timeout=60):
        return self.proc.wait(timeout=timeout)


class Fleet:
    def __init__(self, binary, models, canaries=(), port=0, balance="affinity",
                 replica_args=("--threads", "1", "--kv-cache-memory", "64MiB")):
        """models: [(name, path, replicas)]; canaries: [(name, path, replicas, weight %)]."""
        self.binary = os.path.abspath(binary)
        self.replica_args = list(replica_args)
        self.balance = balance
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="tf_fleet_")
        self.stats_socket = os.path.join(self.dir, "haproxy.sock")
        self.replicas = {}  # model -> [Replica]
        for name, path, n in models:
            self.replicas[name] = [Replica(self, name, path, "%s-%d" % (name, i), 100)
                                   for i in range(n)]
        for name, path, n, percent in canaries:
            # The canary's replicas together get `percent` of the model's traffic.
            stable = self.replicas[name]
            total = 100 * len(stable)
            w = max(1, round(total * percent / (100 - percent) / n))
            stable.extend(Replica(self, name, path, "%s-canary-%d" % (name, i), w)
                          for i in range(n))
        self.haproxy = None

    def config(self):
        """haproxy.cfg for the fleet: render.py's, over this fleet's replicas."""
        return render.render(
            [render.Replica(r.model, "127.0.0.1", r.port, r.weight, name=r.name)
             for reps in self.replicas.values() for r in reps],
            bind="127.0.0.1:%d" % self.port, balance=self.balance,
            stats_socket=self.stats_socket)

    def start(self):
        for reps in self.replicas.values():
            for r in reps:
                r.start()
        for reps in self.replicas.values():
            for r in reps:
                r.wait_ready()
        cfg = os.path.join(self.dir, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(self.config())
        check = subprocess.run(["haproxy", "-c", "-f", cfg], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError("haproxy -c: " + check.stdout + check.stderr)
        self.haproxy = subprocess.Popen(["haproxy", "-db", "-f", cfg],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        servers = {r.name for reps in self.replicas.values() for r in reps}

        def all_up():
            if self.haproxy.poll() is not None:
                raise RuntimeError("haproxy exited: " + self.haproxy.stderr.read().decode())
            states = self.server_states()
            return set(states) == servers and all(s == "UP" for s in states.values())

        self.wait_until(all_up, "every replica UP in haproxy")
        return self

    def url(self, path=""):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def admin(self, command):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(self.stats_socket)
            s.sendall(command.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def server_states(self):
        """{server name: "UP" / "DOWN" / ...} as haproxy sees them."""
        try:
            csv = self.admin("show stat")
        except OSError:
            return {}
        head, *rows = [line for line in csv.splitlines() if line]
        cols = head.lstrip("# ").split(",")
        out = {}
        for row in rows:
            v = dict(zip(cols, row.split(",")))
            if v["svname"] not in ("FRONTEND", "BACKEND"):
                out[v["svname"]] = v["status"].split(" ")[0]
        return out

    def wait_until(self, cond, what, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.05)
        raise RuntimeError("timed out waiting for " + what)

    def restart(self, replica):
        """A rolling restart's step: haproxy stops sending the replica new requests (drain),
        SIGTERM (it finishes what it holds and exits), start it again on its port, and wait
        until haproxy sends it traffic again."""
        self.admin("set server be_%s/%s state drain" % (replica.model, replica.name))
        replica.kill(signal.SIGTERM)
        code = replica.wait()
        if code != 0:
            raise RuntimeError("replica %s exited %d on SIGTERM" % (replica.name, code))
        replica.start()
        replica.wait_ready()
        self.admin("set server be_%s/%s state ready" % (replica.model, replica.name))
        self.wait_until(lambda: self.server_states().get(replica.name) == "UP",
                        replica.name + " UP again")

    def metric_sum(self, name):
        """A metric summed over every live replica's /metrics."""
        return sum(metric_of(r, name) for reps in self.replicas.values() for r in reps
                   if r.proc.poll() is None)

    def stop(self):
        if self.haproxy:
            self.haproxy.terminate()
            try:
                self.haproxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.haproxy.kill()
        for reps in self.replicas.values():
            for r in reps:
                if r.proc and r.proc.poll() is None:
                    r.kill(signal.SIGTERM)
                    try:
                        r.wait(timeout=40)
                    except subprocess.TimeoutExpired:
                        r.kill()
        for f in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, f))
        os.rmdir(self.dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default="build/release/tokenflow")
    ap.add_argument("--model", action="append", required=True, help="NAME=PATH:REPLICAS")
    ap.add_argument("--canary", action="append", default=[], help="NAME=PATH:REPLICAS:PERCENT")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--balance", choices=["affinity", "roundrobin"], default="affinity")
    a = ap.parse_args()

    def split(spec, n):
        name, rest = spec.split("=", 1)
        parts = rest.rsplit(":", n - 1)
        return (name, parts[0], *map(int, parts[1:]))

    fleet = Fleet(a.binary, [split(m, 2) for m in a.model], [split(c, 3) for c in a.canary],
                  a.port, a.balance).start()
    print("tokenflow fleet on %s (%s)" % (fleet.url(), ", ".join(
        "%s x%d" % (n, len(r)) for n, r in fleet.replicas.items())), flush=True)
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))
    while not stop:
        signal.pause()
    fleet.stop()


if __name__ == "__main__":
    sys.exit(main())
