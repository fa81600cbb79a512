"""TF Serving's command line (issue 23): `tokenflow tensorflow_model_server`, and the binary called
through a symlink named tensorflow_model_server, with TF Serving's flag names and defaults
(--port is gRPC, --rest_api_port 0 means no REST API, --model_name / --model_base_path or
--model_config_file). Versions are directories holding stories260K (symlinked).
Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import unittest

from test_registry import make_version
from test_server import BIN, Client, stop_server


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TfModelServerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.exe = os.path.join(self.dir, "tensorflow_model_server")
        os.symlink(BIN, self.exe)
        self.base = os.path.join(self.dir, "story")
        for v in (1, 2):
            make_version(self.base, v)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_exe(self, *args):
        return subprocess.run([self.exe, *args], capture_output=True, text=True, timeout=60)

    def start(self, *args, rest=True, grpc=True):
        """Starts the server; returns (process, the lines it printed on starting)."""
        log = open(os.path.join(self.dir, "log"), "w")
        proc = subprocess.Popen(
            [self.exe, "--kv-cache-memory", "16MiB", "--tensorflow_intra_op_parallelism=1", *args],
            stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        lines = []
        expected = (2 if rest else 1) + (1 if grpc else 0)  # serving, try: curl, gRPC
        for line in proc.stdout:
            lines.append(line)
            if len(lines) == expected:
                return proc, lines
        proc.wait()
        with open(os.path.join(self.dir, "log")) as f:
            raise RuntimeError("server did not start: %r %s" % (lines, f.read()))

    def start_on_free_ports(self, *args, rest=True, grpc=True):
        """TF Serving's port 0 means "no API", so the test picks free ports; should another
        process take one first, the server says so and the test takes others."""
        for attempt in range(5):
            ports = (free_port() if grpc else 0, free_port() if rest else 0)
            try:
                proc, lines = self.start("--port=%d" % ports[0], "--rest_api_port=%d" % ports[1],
                                         *args, rest=rest, grpc=grpc)
                return proc, lines, ports
            except RuntimeError as e:
                if "in use" not in str(e) or attempt == 4:
                    raise

    def test_version_unknown_flags_and_a_missing_model(self):
        for cmd in ([self.exe, "--version"], [BIN, "tensorflow_model_server", "--version"]):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("TensorFlow ModelServer: tokenflow", r.stdout)
        r = self.run_exe("--port=8500", "--no_such_tf_flag=1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--no_such_tf_flag", r.stderr)
        r = self.run_exe()  # neither a base path nor a config file: TF Serving's message
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("model_base_path and server_options.model_config_file are empty", r.stderr)
        r = self.run_exe("--model_base_path=" + self.base, "--ssl_config_file=/some.config")
        self.assertNotEqual(r.returncode, 0)  # not read yet
        self.assertIn("--ssl_config_file", r.stderr)
        batching = os.path.join(self.dir, "bad_batching.config")
        with open(batching, "w") as f:  # TF Serving's own rule: the last size is the largest
            f.write("max_batch_size { value: 32 }\nallowed_batch_sizes: 8\n")
        r = self.run_exe("--model_base_path=" + self.base, "--enable_batching",
                         "--batching_parameters_file=" + batching)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("bad_batching.config: the final entry in allowed_batch_sizes", r.stderr)
        bad = os.path.join(self.dir, "bad_monitoring.config")
        with open(bad, "w") as f:
            f.write("prometheus_config {\n  enable: maybe\n}\n")
        r = self.run_exe("--model_base_path=" + self.base, "--monitoring_config_file=" + bad)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("bad_monitoring.config:", r.stderr)  # the file and place of the mistake
        self.assertIn('"enable"', r.stderr)

    def test_rest_and_grpc_on_tf_servings_flags(self):
        monitoring = os.path.join(self.dir, "monitoring.config")
        with open(monitoring, "w") as f:  # TF Serving's documented form; the default path
            f.write("prometheus_config {\n  enable: true\n}\n")
        proc, lines, (grpc_port, port) = self.start_on_free_ports(
            "--model_name=story", "--model_base_path=" + self.base, "--enable_batching",
            "--rest_api_timeout_in_ms=60000", "--monitoring_config_file=" + monitoring)
        try:
            self.assertIn("on http://0.0.0.0:%d" % port, lines[0])  # every interface, as TF
            self.assertIn("gRPC on 0.0.0.0:%d" % grpc_port, lines[-1])
            with socket.create_connection(("127.0.0.1", grpc_port), timeout=10):
                pass
            c = Client(port)
            status, body, _, _ = c.get("/v1/models/story")
            self.assertEqual(status, 200, body)
            # The base path's latest version serves, as TF Serving's default policy.
            self.assertEqual([(v["version"], v["state"]) for v in body["model_version_status"]],
                             [("2", "AVAILABLE")])
            status, body, _, _ = c.post("/v1/models/story:predict",
                                        {"instances": [{"prompt": "Once upon a time",
                                                        "max_tokens": 3, "temperature": 0}]})
            self.assertEqual(status, 200, body)
            self.assertEqual(len(body["predictions"]), 1)
            self.assertEqual(c.post("/v1/models/nope:predict", {"instances": ["x"]})[0], 404)
            # TF Serving's metric names at its monitoring path (and tokenflow's beside them).
            status, _, text, headers = c.get("/monitoring/prometheus/metrics")
            self.assertEqual(status, 200)
            self.assertTrue(headers["Content-Type"].startswith("text/plain"))
            self.assertIn(':tensorflow:serving:request_count{model_name="story",status="OK"} 2',
                          text)  # the status query and the predict
            self.assertIn(':tensorflow:serving:request_count{model_name="",status="NOT_FOUND"} 1',
                          text)
            self.assertIn(':tensorflow:serving:request_latency_count{model_name="story",'
                          'API="Predict",entrypoint="REST"} 1', text)
            self.assertIn("tokenflow_requests_total", text)
            self.assertNotIn(":tensorflow:serving:", c.get("/metrics")[2])  # tokenflow's own page
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)

    def batch_buckets(self, c, model):
        """The tokenflow_batch_size histogram of a model: {le: steps}."""
        text = c.get("/metrics")[2]
        out = {}
        for m in re.finditer(r'tokenflow_batch_size_bucket\{model="%s",version="\d+",le="([^"]+)"\}'
                             r" (\d+)" % model, text):
            out[m.group(1)] = int(m.group(2))
        return out

    def test_batching_parameters_and_per_model_batch_sizes(self):
        # TF Serving's batching file: max_batch_size caps the sequences of a step.
        batching = os.path.join(self.dir, "batching.config")
        with open(batching, "w") as f:
            f.write("max_batch_size { value: 2 }\nbatch_timeout_micros { value: 0 }\n"
                    "max_enqueued_batches { value: 100 }\nnum_batch_threads { value: 1 }\n"
                    "allowed_batch_sizes: 1\nallowed_batch_sizes: 2\n"
                    "pad_variable_length_inputs: true\n")
        # Per model, in the config file (tokenflow's extension): 'wide' may batch 8 rows.
        config = os.path.join(self.dir, "models.config")
        with open(config, "w") as f:
            f.write("model_config_list {\n"
                    "  config { name: 'narrow' base_path: '%s' model_platform: 'tensorflow' }\n"
                    "  config { name: 'wide' base_path: '%s' model_platform: 'tensorflow'\n"
                    "           max_batch_size: 8 batch_timeout_micros: 100 }\n"
                    "}\n" % (self.base, self.base))
        proc, _, (_, port) = self.start_on_free_ports(
            "--model_config_file=" + config, "--enable_batching",
            "--batching_parameters_file=" + batching, grpc=False)
        try:
            c = Client(port)
            # Four rows of one generate request, each a sequence of its own.
            body = {"inputs": {"input_ids": [[1, 403], [1, 365], [1, 267], [1, 283]],
                               "attention_mask": [[1, 1]] * 4, "max_new_tokens": 40}}
            for model in ("narrow", "wide"):
                status, b, text, _ = c.post("/v1/models/%s:predict" % model, body)
                self.assertEqual(status, 200, text)
                self.assertEqual(len(b["outputs"]), 4)
            narrow, wide = self.batch_buckets(c, "narrow"), self.batch_buckets(c, "wide")
            self.assertEqual(narrow["2"], narrow["+Inf"], narrow)  # never more than 2 a step
            self.assertLess(narrow["1"], narrow["+Inf"], narrow)   # and it did batch
            self.assertLess(wide["2"], wide["+Inf"], wide)         # wide ran more than 2 at once
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)
        with open(os.path.join(self.dir, "log")) as f:
            self.assertIn("allowed_batch_sizes: a continuous batch", f.read())  # noted

    def test_port_zero_turns_an_api_off(self):
        # --rest_api_port's default 0: gRPC only, under --model_name's default name.
        proc, lines, (grpc_port, _) = self.start_on_free_ports(
            "--model_base_path=" + self.base, rest=False)
        try:
            self.assertIn("tokenflow serving default (no HTTP/REST API)", lines[0])
            with socket.create_connection(("127.0.0.1", grpc_port), timeout=10):
                pass
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)
        # --port=0: REST only (no gRPC line).
        proc, lines, (_, port) = self.start_on_free_ports(
            "--model_base_path=" + self.base, grpc=False)
        try:
            self.assertEqual(len(lines), 2)
            self.assertEqual(Client(port).get("/v1/models/default")[0], 200)
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)
        r = self.run_exe("--port=0", "--model_base_path=" + self.base)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("neither an HTTP nor a gRPC port", r.stderr)


if __name__ == "__main__":
    unittest.main()
