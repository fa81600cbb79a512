"""The local fleet (issue 25, item 3): tokenflow replicas behind Debian's haproxy, configured by
deploy/haproxy/fleet.py, all on 127.0.0.1. Under load, kill -9 of a replica loses no
non-streamed request (haproxy retries it on another replica) and cuts the streams it held (no
[DONE]: an error to the client, never a short answer); a rolling restart (SIGTERM,
drain, start, ready) loses nothing; with every replica of one model dead the other model still
answers (and the dead one gets haproxy's 503, not a hang); routing follows the body's "model"
and TF Serving's paths; prefix affinity raises the fleet's prefix-cache hit rate over round
robin on a shared-prefix workload. Waits are for conditions (readyz, haproxy's view of its
servers, request counts), never for fixed times.

Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""

import http.client
import json
import os
import random
import shutil
import signal
import sys
import threading
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "deploy", "haproxy"))
import fleet as F  # noqa: E402

BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(REPO, "build", "release", "tokenflow"))
SHARED = os.environ.get("TF_SHARED_DIR", os.path.join(REPO, "..", "shared"))
STORIES = os.path.join(SHARED, "models", "stories260K", "stories260K.bin")


def post(url, body, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return None, str(e)


class Load:
    """Threads sending non-streamed completions to the fleet until stopped; every answer kept."""

    def __init__(self, fleet, model="a", threads=3):
        self.fleet, self.model = fleet, model
        self.results, self.lock, self.done = [], threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]

    def run(self, i):
        k = 0
        while not self.done.is_set():
            status, body = post(self.fleet.url("/v1/completions"), {
                "model": self.model, "prompt": "Story %d-%d: Once upon a time" % (i, k),
                "max_tokens": 24, "temperature": 0})
            k += 1
            with self.lock:
                self.results.append((status, body))

    def count(self):
        with self.lock:
            return len(self.results)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        for t in self.threads:
            t.join(timeout=120)

    def failures(self):
        with self.lock:
            return [r for r in self.results if r[0] != 200]


@unittest.skipUnless(shutil.which("haproxy"), "haproxy is not installed (Debian's haproxy)")
class FleetTest(unittest.TestCase):
    def setUp(self):
        self.fleet = F.Fleet(BIN, [("a", STORIES, 2), ("b", STORIES, 1)]).start()

    def tearDown(self):
        self.fleet.stop()

    def test_routing_by_model_and_path(self):
        for model in ("a", "b", "a:1", "b@stable"):
            status, body = post(self.fleet.url("/v1/completions"),
                                {"model": model.split("@")[0] if "@" in model else model,
                                 "prompt": "Once", "max_tokens": 4})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["model"], model.split(":")[0].split("@")[0])
        with urllib.request.urlopen(self.fleet.url("/v1/models/b"), timeout=30) as r:
            status = json.loads(r.read())
        self.assertEqual(status["model_version_status"][0]["state"], "AVAILABLE")

    def test_kill_9_under_load_loses_no_request(self):
        victim = self.fleet.replicas["a"][0]
        with Load(self.fleet) as load:
            self.fleet.wait_until(lambda: load.count() >= 30, "30 requests before the kill")
            victim.kill(signal.SIGKILL)
            victim.wait()
            self.fleet.wait_until(
                lambda: self.fleet.server_states().get(victim.name) == "DOWN",
                "haproxy to mark the killed replica down")
            after = load.count()
            self.fleet.wait_until(lambda: load.count() >= after + 30, "30 requests after")
        self.assertEqual(load.failures(), [])
        self.assertGreaterEqual(len(load.results), 60)

    def test_kill_9_ends_the_streams_it_held_with_an_error(self):
        # Streams of one prompt go to one replica (affinity); n = 8 and 480 tokens keep it busy.
        # The replica holding them is found by its running gauge, then killed: each stream it
        # held ends cut off (no [DONE]), which a client sees as an error, never as a whole answer.
        streams = []
        for _ in range(4):
            conn = http.client.HTTPConnection("127.0.0.1", self.fleet.port, timeout=60)
            conn.request("POST", "/v1/completions", json.dumps({
                "model": "a", "prompt": "Once upon a time", "max_tokens": 480, "n": 8,
                "ignore_eos": True, "stream": True, "temperature": 1.0}),
                {"Content-Type": "application/json"})
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            self.assertTrue(resp.readline().startswith(b"data: "))  # it has begun
            streams.append((conn, resp))
        busy = []
        self.fleet.wait_until(lambda: busy.extend(
            r for r in self.fleet.replicas["a"]
            if F.metric_of(r, "tokenflow_num_requests_running") > 0) or busy,
            "the replica holding the streams")
        busy[0].kill(signal.SIGKILL)
        cut = 0
        for conn, resp in streams:
            try:
                body = resp.read().decode()
                whole = body.rstrip().endswith("data: [DONE]")
            except (http.client.IncompleteRead, ConnectionError):
                whole = False
            cut += not whole
            conn.close()
        self.assertGreater(cut, 0, "a stream on the killed replica came back whole")

    def test_rolling_restart_loses_nothing(self):
        with Load(self.fleet) as load:
            for replica in self.fleet.replicas["a"]:
                before = load.count()
                self.fleet.wait_until(lambda: load.count() >= before + 10, "traffic flowing")
                self.fleet.restart(replica)
            after = load.count()
            self.fleet.wait_until(lambda: load.count() >= after + 10, "traffic after")
        self.assertEqual(load.failures(), [])

    def test_one_model_down_leaves_the_other_serving(self):
        for r in self.fleet.replicas["b"]:
            r.kill(signal.SIGKILL)
            r.wait()
        self.fleet.wait_until(lambda: self.fleet.server_states().get("b-0") == "DOWN",
                              "b's replica down in haproxy")
        with Load(self.fleet, "a") as load:
            self.fleet.wait_until(lambda: load.count() >= 20, "20 requests to a")
        self.assertEqual(load.failures(), [])
        status, _ = post(self.fleet.url("/v1/completions"),
                         {"model": "b", "prompt": "Once", "max_tokens": 4})
        self.assertEqual(status, 503)


def prefix_hit_rate(balance):
    """A shared-prefix workload (8 long preambles, each asked 6 times with different
    questions, in a fixed shuffled order) through a 3-replica fleet: the fleet's prefix-cache
    hit rate (hit tokens / looked-up tokens over every replica)."""
    fleet = F.Fleet(BIN, [("a", STORIES, 3)], balance=balance).start()
    try:
        words = "once upon a time there was a little girl named lily who loved to play".split()
        rng = random.Random(7)
        preambles = [" ".join(rng.choice(words) for _ in range(120)) for _ in range(8)]
        work = [(p, q) for p in preambles for q in range(6)]
        rng.shuffle(work)
        for p, q in work:
            status, body = post(fleet.url("/v1/completions"), {
                "model": "a", "prompt": "%s. Question %d:" % (p, q), "max_tokens": 2})
            assert status == 200, body
        hits = fleet.metric_sum("tokenflow_prefix_cache_hits_total")
        queries = fleet.metric_sum("tokenflow_prefix_cache_queries_total")
        return hits / queries
    finally:
        fleet.stop()


@unittest.skipUnless(shutil.which("haproxy"), "haproxy is not installed (Debian's haproxy)")
class AffinityTest(unittest.TestCase):
    def test_prefix_affinity_raises_the_hit_rate(self):
        affinity = prefix_hit_rate("affinity")
        robin = prefix_hit_rate("roundrobin")
        print("\nprefix-cache hit rate: affinity %.3f, round robin %.3f (%.2fx)"
              % (affinity, robin, affinity / robin), file=sys.stderr)
        self.assertGreater(affinity, robin * 1.2)


if __name__ == "__main__":
    unittest.main()
