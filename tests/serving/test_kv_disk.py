"""The prefix cache's tier on disk (`serve --kv-cache-dir`, issue 55): a prompt's blocks written
by one server process are read by the next (a restart) and by another sharing the directory,
with the answer of recomputing them; a process killed while writing leaves a directory the next
one reads correctly; a tenant's blocks on disk serve that tenant alone (its salt is keyed by the
directory's secret, so it means the same in every process sharing it)."""

import glob
import os
import shutil
import signal
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, Client, start_server, stop_server, wait_for  # noqa: E402

# About 250 tokens of stories260K's vocabulary: 15 full blocks of 16, of its 512-token context.
PROMPT = " ".join(["Lily and Ben were friends. They liked to play in the park after school."] * 10)
OTHER = " ".join(["Tom had a red ball and a big dog. The dog ran to the tree every day."] * 10)


def completion(c, prompt, key=None):
    """A greedy 16-token completion with logprobs: (text, logprobs)."""
    headers = {"Authorization": "Bearer " + key} if key else None
    s, b, text, _ = c.post("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 16,
                                               "temperature": 0, "logprobs": 1},
                           headers=headers)
    assert s == 200, text
    return b["choices"][0]["text"], b["choices"][0]["logprobs"]["token_logprobs"]


def engine_stats(c, key=None):
    headers = {"Authorization": "Bearer " + key} if key else None
    s, b, text, _ = c.get("/v1/admin/stats", headers=headers)
    assert s == 200, text
    return b["models"][MODEL]


class DiskCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tf_kv_disk_")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                stop_server(p, expect=None)
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, *extra):
        proc, port = start_server("--threads", "1", "--kv-cache-dir", self.dir, *extra)
        self.procs.append(proc)
        return proc, Client(port)

    def entries(self):
        return glob.glob(os.path.join(self.dir, "??", "*.kv"))

    def assertSameAnswer(self, got, want):
        self.assertEqual(got[0], want[0])
        self.assertEqual(len(got[1]), len(want[1]))
        for a, b in zip(got[1], want[1]):
            self.assertAlmostEqual(a, b, delta=1e-4)


class RestartTest(DiskCase):
    def test_a_restarted_server_reads_the_prefix_from_disk(self):
        proc, c = self.start()
        want = completion(c, PROMPT)
        first = engine_stats(c)
        self.assertEqual(first["kv_disk_hit_blocks"], 0)
        stop_server(proc)  # a graceful stop writes every block offered
        written = len(self.entries())
        self.assertGreaterEqual(written, 15)

        proc, c = self.start()
        self.assertSameAnswer(completion(c, PROMPT), want)
        # The answer goes out before its last step is recorded: wait for the record.
        self.assertTrue(wait_for(lambda: engine_stats(c)["requests_finished"] == 1))
        s = engine_stats(c)
        self.assertGreaterEqual(s["kv_disk_hit_blocks"], 15)
        self.assertEqual(s["kv_disk_prompt_tokens"], 16 * s["kv_disk_hit_blocks"])
        self.assertEqual(s["prefix_hit_tokens"], s["kv_disk_prompt_tokens"])
        self.assertEqual(s["kv_disk_corrupt"], 0)
        metrics = c.get("/metrics")[2]
        self.assertRegex(metrics, r'tokenflow_kv_disk_hits_total\{model="stories260K",version="\d+"\} %d\n'
                         % s["kv_disk_hit_blocks"])
        self.assertRegex(metrics, r'tokenflow_kv_disk_prompt_tokens_total\{[^}]*\} [1-9]')
        # Another prompt: looked up, not there (a miss), computed, then written.
        completion(c, OTHER)
        self.assertTrue(wait_for(lambda: engine_stats(c)["kv_disk_written_blocks"] >= 15))
        s = engine_stats(c)
        self.assertEqual(s["kv_disk_lookups"], 2)
        self.assertEqual(s["kv_disk_miss_blocks"], 1)
        self.assertGreater(s["kv_disk_written_bytes"], 0)


class KilledWriterTest(DiskCase):
    def test_a_killed_process_leaves_a_directory_the_next_one_reads(self):
        proc, c = self.start()
        want = completion(c, PROMPT)
        want_other = completion(c, OTHER)
        self.assertTrue(wait_for(lambda: engine_stats(c)["kv_disk_written_blocks"] >= 30))
        # Killed whatever it is doing: here, taking a third request whose blocks it may be
        # computing or writing.
        def third():
            try:
                c.post("/v1/completions", {"model": MODEL, "prompt": "The end. " + OTHER,
                                           "max_tokens": 16})
            except OSError:  # the server is killed under it
                pass

        threading.Thread(target=third, daemon=True).start()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.err_file.close()
        # And what a crash mid-write can leave besides: a temporary never renamed into place,
        # entries cut short, empty ones (every entry one or the other, so that the first block
        # of each prompt is among them).
        with open(os.path.join(self.dir, "tmp", "999999.1.part"), "wb") as f:
            f.write(b"TFKVBLK1 half")
        entries = sorted(self.entries())
        self.assertGreaterEqual(len(entries), 30)
        for i, path in enumerate(entries):
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2 if i % 2 else 0)
        proc, c = self.start()
        for _ in range(2):
            self.assertSameAnswer(completion(c, PROMPT), want)
            self.assertSameAnswer(completion(c, OTHER), want_other)
        s = engine_stats(c)
        self.assertEqual(s["kv_disk_corrupt"], 2)  # each prompt's first block: then recomputed
        stop_server(proc)


class SharedDirectoryTest(DiskCase):
    def test_two_servers_share_one_directory(self):
        _, a = self.start()
        _, b = self.start()
        want = completion(a, PROMPT)
        self.assertTrue(wait_for(lambda: engine_stats(a)["kv_disk_written_blocks"] >= 15))
        self.assertSameAnswer(completion(b, PROMPT), want)
        self.assertGreaterEqual(engine_stats(b)["kv_disk_hit_blocks"], 15)
        # Both at once, writing and reading the same keys.
        prompts = [OTHER + " " + str(i) for i in range(4)]
        answers = {}

        def run(name, client, prompt):
            answers[(name, prompt)] = completion(client, prompt)

        threads = [threading.Thread(target=run, args=(n, cl, p))
                   for p in prompts for n, cl in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for p in prompts:
            self.assertSameAnswer(answers[("b", p)], answers[("a", p)])
        self.assertEqual(engine_stats(a)["kv_disk_corrupt"] + engine_stats(b)["kv_disk_corrupt"], 0)


class TenantTest(DiskCase):
    def test_a_tenants_blocks_on_disk_serve_that_tenant_alone(self):
        keys = os.path.join(self.dir, "..", os.path.basename(self.dir) + ".keys")
        with open(keys, "w") as f:
            f.write("sk-alice name=alice admin\nsk-bob name=bob admin\n")
        try:
            proc, c = self.start("--api-keys-file", keys)
            want = completion(c, PROMPT, key="sk-alice")
            stop_server(proc)
            # A restart: another process, whose salts must mean what the last one's did.
            proc, c = self.start("--api-keys-file", keys)
            self.assertSameAnswer(completion(c, PROMPT, key="sk-bob"), want)
            s = engine_stats(c, key="sk-bob")
            self.assertEqual(s["kv_disk_hit_blocks"], 0)
            self.assertEqual(s["prefix_hit_tokens"], 0)
            self.assertSameAnswer(completion(c, PROMPT, key="sk-alice"), want)
            self.assertGreaterEqual(engine_stats(c, key="sk-alice")["kv_disk_hit_blocks"], 15)
            # The secret that keys the salts sits in the directory, readable by its owner alone.
            self.assertEqual(os.stat(os.path.join(self.dir, "secret")).st_mode & 0o777, 0o600)
        finally:
            os.unlink(keys)


class FlagsTest(unittest.TestCase):
    def test_a_fraction_is_not_a_disk_size(self):
        with self.assertRaises(RuntimeError) as e:
            start_server("--kv-cache-dir", tempfile.gettempdir(), "--kv-cache-dir-size", "0.5")
        self.assertIn("--kv-cache-dir-size", str(e.exception))


if __name__ == "__main__":
    unittest.main()
