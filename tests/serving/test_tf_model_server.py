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

    def start(self, *args):
        """Starts the server; returns (process, the lines it printed up to its gRPC line)."""
        log = open(os.path.join(self.dir, "log"), "w")
        proc = subprocess.Popen(
            [self.exe, "--kv-cache-memory", "16MiB", "--tensorflow_intra_op_parallelism=1", *args],
            stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("tokenflow gRPC on"):
                return proc, lines
        proc.wait()
        with open(os.path.join(self.dir, "log")) as f:
            raise RuntimeError("server did not start: %r %s" % (lines, f.read()))

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
        r = self.run_exe("--model_base_path=" + self.base, "--monitoring_config_file=/m.config")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--monitoring_config_file", r.stderr)

    def test_rest_and_grpc_on_tf_servings_flags(self):
        # TF Serving's port 0 means "no REST API", so the test picks a free port; should another
        # process take it first, the server says so and the test takes another.
        for attempt in range(5):
            port = free_port()
            try:
                proc, lines = self.start("--port=0", "--rest_api_port=%d" % port,
                                         "--model_name=story", "--model_base_path=" + self.base,
                                         "--enable_batching", "--rest_api_timeout_in_ms=60000")
                break
            except RuntimeError as e:
                if "in use" not in str(e) or attempt == 4:
                    raise
        try:
            self.assertIn("on http://0.0.0.0:%d" % port, lines[0])  # every interface, as TF
            grpc_port = int(re.search(r"gRPC on 0\.0\.0\.0:(\d+)", lines[-1]).group(1))
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
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)

    def test_without_rest_api_port_there_is_no_rest_api(self):
        proc, lines = self.start("--port=0", "--model_base_path=" + self.base)
        try:
            self.assertIn("no HTTP/REST API", lines[0])
            self.assertIn("tokenflow serving default ", lines[0])  # --model_name's default
            grpc_port = int(re.search(r"gRPC on 0\.0\.0\.0:(\d+)", lines[-1]).group(1))
            with socket.create_connection(("127.0.0.1", grpc_port), timeout=10):
                pass
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)


if __name__ == "__main__":
    unittest.main()
