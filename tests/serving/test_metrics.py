"""Integration tests of GET /metrics: the Prometheus text format checked by Debian's `promtool`,
counters that agree with what the test sent (requests by code, tokens, sequences), the KV gauge
back at zero after the requests, and a real Prometheus server on 127.0.0.1 scraping the server:
its HTTP API returns the request count and a finite P99 from histogram_quantile.
Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

from test_server import BIN, REPO, STORIES_BIN, Client, sse_events, start_server, stop_server

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def parse_metrics(text):
    """{(name, frozenset(labels)): value} and the set of names with HELP and TYPE."""
    samples, typed, helped = {}, set(), set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line:
            m = SERIES.match(line)
            assert m, "bad sample line %r" % line
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            samples[(m.group(1), labels)] = float(m.group(3))
    return samples, typed, helped


def value(samples, name, **labels):
    want = set(labels.items())
    return sum(v for (n, l), v in samples.items() if n == name and want <= set(l))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.proc, self.port = start_server()
        self.c = Client(self.port)

    def tearDown(self):
        stop_server(self.proc)

    def send_mix(self):
        """Requests of every kind; returns what the test expects the counters to say."""
        ok, prompt, gen, seqs = 0, 0, 0, 0
        for i in range(6):
            status, body, _, _ = self.c.post("/v1/completions", {
                "prompt": "Once upon a time", "max_tokens": 5 + i, "n": 1 + i % 2})
            self.assertEqual(status, 200)
            ok += 1
            prompt += body["usage"]["prompt_tokens"]
            gen += body["usage"]["completion_tokens"]
            seqs += 1
        head, text = self.c.raw_stream("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 7, "stream": True,
            "stream_options": {"include_usage": True}})
        usage = sse_events(text)[-1]["usage"]
        ok += 1
        prompt += usage["prompt_tokens"]
        gen += usage["completion_tokens"]
        seqs += 1
        bad = sum(self.c.post("/v1/completions", b, raw=r)[0] == 400 for b, r in (
            (None, "{not json"), ({"prompt": "x", "temperature": -1}, None),
            ({"prompt": "x", "max_tokens": "many"}, None)))
        missing = sum(self.c.post("/v1/completions", {"model": "nope", "prompt": "x"})[0] == 404
                      for _ in range(2))
        return ok, bad, missing, prompt, gen

    def test_counters_agree_with_what_was_sent_and_promtool_accepts_them(self):
        ok, bad, missing, prompt, gen = self.send_mix()
        self.assertEqual((bad, missing), (3, 2))
        status, _, text, headers = self.c.get("/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        samples, typed, helped = parse_metrics(text)
        # Every series has HELP and TYPE.
        for (name, _) in samples:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            self.assertTrue(name in typed or base in typed, name)
            self.assertTrue(name in helped or base in helped, name)
        m = {"model": "stories260K", "version": "1"}
        self.assertEqual(value(samples, "tokenflow_requests_total", code="200", **m), ok)
        self.assertEqual(value(samples, "tokenflow_requests_total", code="400"), bad)
        self.assertEqual(value(samples, "tokenflow_requests_total", code="404"), missing)
        self.assertEqual(value(samples, "tokenflow_requests_total", outcome="client_error"),
                         bad + missing)
        self.assertEqual(value(samples, "tokenflow_prompt_tokens_total", **m), prompt)
        self.assertEqual(value(samples, "tokenflow_generation_tokens_total", **m), gen)
        self.assertEqual(value(samples, "tokenflow_request_duration_seconds_count", **m), ok)
        # One time to first token per request (n > 1 shares its prompt: one engine request).
        self.assertEqual(value(samples, "tokenflow_time_to_first_token_seconds_count", **m), ok)
        self.assertGreater(value(samples, "tokenflow_inter_token_latency_seconds_count", **m), 0)
        # The engine's gauges are its state at the end of its last step, which may end just
        # after the last answer went out: the blocks read as free within a moment.
        deadline = time.time() + 10
        while (value(samples, "tokenflow_kv_cache_blocks_used", **m) != 0
               and time.time() < deadline):
            time.sleep(0.05)
            samples, _, _ = parse_metrics(self.c.get("/metrics")[2])
        self.assertEqual(value(samples, "tokenflow_kv_cache_blocks_used", **m), 0)
        self.assertGreater(value(samples, "tokenflow_kv_cache_capacity_blocks", **m), 0)
        self.assertEqual(value(samples, "tokenflow_model_version_state", state="AVAILABLE", **m), 1)
        self.assertGreater(value(samples, "process_resident_memory_bytes"), 1 << 20)
        # Scrapes and probes are not counted as requests.
        self.c.get("/healthz")
        samples2, _, _ = parse_metrics(self.c.get("/metrics")[2])
        self.assertEqual(value(samples2, "tokenflow_requests_total"),
                         value(samples, "tokenflow_requests_total"))
        self.assertIsNotNone(PROMTOOL, "promtool (Debian's prometheus package) is needed: "
                                       "run scripts/setup.sh")
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_a_real_prometheus_scrapes_qps_and_p99(self):
        self.assertIsNotNone(PROMETHEUS, "prometheus (Debian's package) is needed: run "
                                         "scripts/setup.sh")
        d = tempfile.mkdtemp(prefix="tf_prom_")
        try:
            port = free_port()
            with open(os.path.join(d, "prometheus.yml"), "w") as f:
                f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n"
                        "  - job_name: tokenflow\n    static_configs:\n"
                        "      - targets: ['127.0.0.1:%d']\n" % self.port)
            prom = subprocess.Popen(
                [PROMETHEUS, "--config.file", os.path.join(d, "prometheus.yml"),
                 "--storage.tsdb.path", os.path.join(d, "data"),
                 "--web.listen-address", "127.0.0.1:%d" % port],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                ok, _, _, _, _ = self.send_mix()

                def query(q):
                    url = "http://127.0.0.1:%d/api/v1/query?%s" % (
                        port, urllib.parse.urlencode({"query": q}))
                    with urllib.request.urlopen(url, timeout=10) as r:
                        body = json.load(r)
                    assert body["status"] == "success", body
                    return body["data"]["result"]

                count, p99 = None, None
                deadline = time.time() + 60
                while time.time() < deadline:
                    try:
                        res = query('sum(tokenflow_requests_total{code="200"})')
                        count = float(res[0]["value"][1]) if res else None
                        res = query("histogram_quantile(0.99, sum by (le) "
                                    "(tokenflow_request_duration_seconds_bucket))")
                        p99 = float(res[0]["value"][1]) if res else None
                    except OSError:
                        pass  # still starting
                    if count == ok and p99 is not None:
                        break
                    time.sleep(0.5)
                self.assertEqual(count, ok)
                self.assertTrue(p99 is not None and 0 < p99 < 600, p99)
                # Every query of the Grafana dashboard is valid PromQL over series that exist.
                with open(os.path.join(REPO, "deploy", "grafana", "tokenflow.json")) as f:
                    dash = json.load(f)
                samples, typed, _ = parse_metrics(self.c.get("/metrics")[2])
                # A family exists once declared (per-key series only appear with keys on).
                names = {n for n, _ in samples} | typed
                for panel in dash["panels"]:
                    for target in panel["targets"]:
                        expr = (target["expr"].replace("$__rate_interval", "1m")
                                .replace('"$model"', '".*"'))
                        for metric in re.findall(r"\b((?:tokenflow|process)_[a-z_]+)", expr):
                            self.assertIn(metric, names, panel["title"])
                        query(expr)  # raises on a syntax error
            finally:
                prom.terminate()
                prom.wait(30)
        finally:
            shutil.rmtree(d, ignore_errors=True)


class BenchUrlTest(unittest.TestCase):
    """`tokenflow bench --url` against the real server: its counts agree with the server's."""

    def setUp(self):
        self.proc, self.port = start_server("--access-log", "off")
        self.dir = tempfile.mkdtemp(prefix="tf_bench_")

    def tearDown(self):
        stop_server(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)

    def bench(self, *args):
        out = os.path.join(self.dir, "out.json")
        p = subprocess.run([BIN, "bench", "--url", "http://127.0.0.1:%d" % self.port,
                            "--json-out", out, *args], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            return json.load(f), p.stdout

    def test_sweep_counts_and_percentiles(self):
        res, text = self.bench("--sweep", "1,4", "--num-prompts", "8", "--input-len", "16",
                               "--output-len", "8")
        self.assertEqual([lv["concurrency"] for lv in res["levels"]], [1, 4])
        for lv in res["levels"]:
            self.assertEqual((lv["completed"], lv["output_tokens"], lv["errors"]), (8, 64, {}))
            for key in ("ttft_ms", "itl_ms", "e2e_ms"):
                self.assertTrue(0 <= lv[key]["p50"] <= lv[key]["p90"] <= lv[key]["p99"], lv)
            self.assertLessEqual(lv["ttft_ms"]["p99"], lv["e2e_ms"]["p99"])
            self.assertGreater(lv["output_throughput"], 0)
        self.assertIn("out tok/s", text)
        samples, _, _ = parse_metrics(Client(self.port).get("/metrics")[2])
        self.assertEqual(value(samples, "tokenflow_generation_tokens_total"), 128)
        self.assertEqual(value(samples, "tokenflow_requests_total", code="200"), 16)
        # The chart, where Debian's matplotlib is installed.
        png = os.path.join(self.dir, "chart.png")
        p = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "plot-bench"),
                            os.path.join(self.dir, "out.json"), "-o", png],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_poisson_rates_and_a_dataset(self):
        data = os.path.join(self.dir, "prompts.jsonl")
        with open(data, "w") as f:
            f.write('{"prompt": "Once upon a time", "max_tokens": 5}\n\n'
                    '{"prompt": "The little dog", "max_tokens": 7}\n')
        res, _ = self.bench("--request-rate", "40", "--num-prompts", "6", "--dataset", data)
        lv = res["levels"][0]
        self.assertEqual((lv["rate"], lv["completed"], lv["output_tokens"]), (40, 6, 36))

    def test_sharegpt_workload_system_prompts_and_the_slo(self):
        # Lengths drawn around the medians, half the prompts behind one 32-id system prompt.
        res, _ = self.bench("--workload", "sharegpt", "--request-rate", "50,100",
                            "--num-prompts", "12", "--input-len", "16", "--output-len", "6",
                            "--system-prompt-len", "32", "--system-share", "0.5")
        self.assertEqual([lv["rate"] for lv in res["levels"]], [50, 100])
        self.assertEqual(res["workload"], "sharegpt")
        self.assertIsNone(res["slo"]["broken_at"])
        lv = res["levels"][0]
        self.assertEqual(lv["completed"], 12)
        # Every request gets the length it drew (ignore_eos), and the draws are not the medians.
        self.assertEqual(lv["output_tokens"], round(lv["mean_max_tokens"] * 12))
        self.assertNotEqual(lv["mean_max_tokens"], 6)
        self.assertGreater(lv["mean_prompt_ids"], 16 + 8)  # the system prompt on some of them
        fixed, _ = self.bench("--request-rate", "50", "--num-prompts", "4", "--input-len", "16",
                              "--output-len", "6")
        self.assertEqual((fixed["levels"][0]["mean_prompt_ids"],
                          fixed["levels"][0]["mean_max_tokens"]), (16, 6))
        # An objective no level can meet: the sweep stops after its first level and says so.
        res, text = self.bench("--request-rate", "50,100,200", "--num-prompts", "4",
                               "--input-len", "16", "--output-len", "4", "--slo-ttft-ms", "0.001")
        self.assertEqual([lv["rate"] for lv in res["levels"]], [50])
        self.assertEqual(res["slo"]["broken_at"], 50)
        self.assertIn("SLO broken at rate 50", text)
        for bad in (["--workload", "zipf"], ["--system-share", "1.5"], ["--slo-itl-ms", "-1"]):
            p = subprocess.run([BIN, "bench", "--url", "http://127.0.0.1:%d" % self.port, *bad],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0, bad)
            self.assertIn(bad[0], p.stderr)

    def test_rejections_keep_their_status_and_draws_fit_max_model_len(self):
        # A prompt past the server's 512-token context: its 400 is reported as such (Boost
        # 1.74's parser once turned every response with a Content-Length into "body limit").
        p = subprocess.run([BIN, "bench", "--url", "http://127.0.0.1:%d" % self.port,
                            "--num-prompts", "2", "--input-len", "600", "--output-len", "4"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("HTTP 400", p.stdout + p.stderr)
        self.assertNotIn("body limit", p.stdout + p.stderr)
        # Draws of up to 8x / 4x the medians behind a 100-id system prompt would pass 512 often
        # (sigma 1.0 around 200): with --max-model-len every one fits, none is refused.
        res, _ = self.bench("--workload", "sharegpt", "--request-rate", "200", "--num-prompts",
                            "24", "--input-len", "200", "--output-len", "60",
                            "--system-prompt-len", "100", "--system-share", "1",
                            "--max-model-len", "512")
        lv = res["levels"][0]
        self.assertEqual((lv["completed"], lv["errors"]), (24, {}))
        self.assertEqual(res["max_model_len"], 512)
        self.assertLessEqual(lv["mean_prompt_ids"] + lv["mean_max_tokens"], 512)
        for bad in (["--max-model-len", "-1"],
                    ["--max-model-len", "10", "--input-len", "16", "--output-len", "6"]):
            p = subprocess.run([BIN, "bench", "--url", "http://127.0.0.1:%d" % self.port, *bad],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0, bad)
            self.assertIn("--max-model-len", p.stderr)

    def test_failures_are_reported(self):
        p = subprocess.run([BIN, "bench", "--url", "http://127.0.0.1:1", "--num-prompts", "2"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("2 requests failed", p.stderr)
        p = subprocess.run([BIN, "bench", "--url", "ftp://x"], capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("http://", p.stderr)


class DeployFilesTest(unittest.TestCase):
    def test_prometheus_config_is_valid(self):
        self.assertIsNotNone(PROMTOOL, "promtool is needed: run scripts/setup.sh")
        p = subprocess.run([PROMTOOL, "check", "config",
                            os.path.join(REPO, "deploy", "prometheus.yml")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class AccessLogTest(unittest.TestCase):
    def run_server(self, *flags):
        d = tempfile.mkdtemp(prefix="tf_access_")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "access.log")
        proc, port = start_server("--access-log", path, *flags)
        c = Client(port)
        status, body, _, _ = c.post("/v1/completions", {"prompt": "Once upon a time",
                                                        "max_tokens": 6},
                                    headers={"X-Request-Id": "trace-42"})
        self.assertEqual(status, 200)
        self.assertEqual(c.post("/v1/completions", {"prompt": "x", "top_p": 7})[0], 400)
        c.get("/metrics")  # not logged
        stop_server(proc)
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        return body, lines

    def test_one_json_line_per_request_without_prompts(self):
        body, lines = self.run_server()
        self.assertEqual(len(lines), 2)
        ok, bad = lines
        self.assertEqual(list(ok), ["time", "request_id", "remote", "method", "path", "model",
                                    "version", "status", "prompt_tokens", "completion_tokens",
                                    "ttft_ms", "duration_ms", "finish_reason"])
        self.assertEqual((ok["request_id"], ok["model"], ok["version"], ok["status"]),
                         ("trace-42", "stories260K", 1, 200))
        self.assertEqual(ok["prompt_tokens"], body["usage"]["prompt_tokens"])
        self.assertEqual(ok["completion_tokens"], body["usage"]["completion_tokens"])
        self.assertEqual(ok["finish_reason"], body["choices"][0]["finish_reason"])
        self.assertTrue(0 <= ok["ttft_ms"] <= ok["duration_ms"], ok)
        self.assertEqual((bad["status"], bad["ttft_ms"]), (400, None))
        self.assertTrue(bad["request_id"].startswith("req-"))
        self.assertNotIn("prompt", ok)

    def test_every_door_logs_its_finish_reason(self):
        # Issue 19: the finish reason was logged for unary completions only.
        d = tempfile.mkdtemp(prefix="tf_access_")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "access.log")
        proc, port = start_server("--access-log", path)
        c = Client(port)
        c.raw_stream("/v1/completions", {"prompt": "Once", "max_tokens": 3, "stream": True,
                                         "ignore_eos": True})
        c.raw_stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                              "max_tokens": 3, "stream": True,
                                              "ignore_eos": True})
        status, _, text, _ = c.post("/v1/models/stories260K:predict",
                                    {"instances": [{"prompt": "Once", "max_tokens": 3,
                                                    "ignore_eos": True}]})
        self.assertEqual(status, 200, text)
        stop_server(proc)
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual([(e["path"], e["finish_reason"], e["completion_tokens"]) for e in lines],
                         [("/v1/completions", "length", 3), ("/v1/chat/completions", "length", 3),
                          ("/v1/models/stories260K:predict", "length", 3)])

    def test_prompts_only_with_the_flag(self):
        _, lines = self.run_server("--log-prompts")
        self.assertEqual(lines[0]["prompt"], "Once upon a time")


if __name__ == "__main__":
    unittest.main()
