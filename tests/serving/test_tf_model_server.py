"""TF Serving's command line (issue 23): `tokenflow tensorflow_model_server`, and the binary called
through a symlink named tensorflow_model_server, with TF Serving's flag names and defaults
(--port is gRPC, --rest_api_port 0 means no REST API, --model_name / --model_base_path or
--model_config_file). Versions are directories holding stories260K (symlinked).
Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

import grpc
import yaml

from test_grpc import model_service_pb2_grpc, status_pb2
from test_registry import make_version
from test_server import BIN, Client, self_signed_cert, stop_server

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


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
        for flags, message in (
                (["--saved_model_tags=serve,gpu"], "--saved_model_tags=serve,gpu"),
                (["--rest_api_enable_cors_support=true"], "--rest_api_enable_cors_support"),
                (["--grpc_channel_arguments=nokey"], "'nokey' is not key=value"),
                (["--use_tflite_model=true", "--xla_cpu_compilation_enabled=true"],
                 "not expected: --xla_cpu_compilation_enabled=true --use_tflite_model=true")):
            r = self.run_exe("--model_base_path=" + self.base, *flags)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(message, r.stderr)  # named, in one error
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

    def status_over(self, channel, name="default"):
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        req = status_pb2.GetModelStatusRequest()
        req.model_spec.name = name
        return stub.GetModelStatus(req, timeout=30)

    def write_ssl_config(self, name, **fields):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:  # PEM inline, as TF Serving's SSLConfig holds it
            for k, v in fields.items():
                f.write("%s: %s\n" % (k, json.dumps(v) if isinstance(v, str) else
                                      str(v).lower()))
        return path

    def test_ssl_config_secures_grpc_with_optional_client_verification(self):
        cert, key = self_signed_cert(self.dir)
        client_dir = os.path.join(self.dir, "client")
        os.makedirs(client_dir)
        client_cert, client_key = self_signed_cert(client_dir)

        def read(path):
            with open(path) as f:
                return f.read()
        plain = self.write_ssl_config("ssl.config", server_key=read(key), server_cert=read(cert))
        proc, lines, (grpc_port, _) = self.start_on_free_ports(
            "--model_base_path=" + self.base, "--ssl_config_file=" + plain, rest=False)
        try:
            self.assertIn("with TLS", lines[-1])
            address = "127.0.0.1:%d" % grpc_port
            creds = grpc.ssl_channel_credentials(root_certificates=read(cert).encode())
            with grpc.secure_channel(address, creds) as ch:
                self.assertEqual(self.status_over(ch).model_version_status[0].version, 2)
            with grpc.insecure_channel(address) as ch:  # plain text is not served
                with self.assertRaises(grpc.RpcError):
                    self.status_over(ch)
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)
        # client_verify: only a client holding a certificate custom_ca verifies gets in.
        verify = self.write_ssl_config("ssl_verify.config", server_key=read(key),
                                       server_cert=read(cert), custom_ca=read(client_cert),
                                       client_verify=True)
        proc, _, (grpc_port, _) = self.start_on_free_ports(
            "--model_base_path=" + self.base, "--ssl_config_file=" + verify, rest=False)
        try:
            address = "127.0.0.1:%d" % grpc_port
            anonymous = grpc.ssl_channel_credentials(root_certificates=read(cert).encode())
            with grpc.secure_channel(address, anonymous) as ch:
                with self.assertRaises(grpc.RpcError):
                    self.status_over(ch)
            known = grpc.ssl_channel_credentials(root_certificates=read(cert).encode(),
                                                 private_key=read(client_key).encode(),
                                                 certificate_chain=read(client_cert).encode())
            with grpc.secure_channel(address, known) as ch:
                self.assertEqual(self.status_over(ch).model_version_status[0].version, 2)
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)
        # A file name where TF Serving's SSLConfig holds PEM text, and client_verify without a CA.
        for config, message in (
                (self.write_ssl_config("names.config", server_key=key, server_cert=cert),
                 "server_key must hold PEM text"),
                (self.write_ssl_config("noca.config", server_key=read(key),
                                       server_cert=read(cert), client_verify=True),
                 "client_verify needs custom_ca")):
            r = self.run_exe("--model_base_path=" + self.base, "--ssl_config_file=" + config)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(message, r.stderr)

    def test_grpc_socket_path_and_channel_arguments(self):
        sock = os.path.join(self.dir, "grpc.sock")
        proc, _, _ = self.start_on_free_ports(
            "--model_base_path=" + self.base, "--grpc_socket_path=" + sock,
            "--grpc_channel_arguments=grpc.max_concurrent_streams=16,grpc.http2.lookahead_bytes=1",
            "--grpc_max_threads=8", rest=False)
        try:
            with grpc.insecure_channel("unix:" + sock) as ch:
                self.assertEqual(self.status_over(ch).model_version_status[0].state,
                                 status_pb2.ModelVersionStatus.AVAILABLE)
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)

    def test_a_tf_serving_deployment_runs_with_only_the_image_changed(self):
        with open(os.path.join(HERE, "manifests", "tf-serving-deployment.yaml")) as f:
            deployment = yaml.safe_load(f)
        spec = deployment["spec"]["template"]["spec"]
        container = spec["containers"][0]
        self.assertEqual(container["image"].split(":")[0], "tensorflow/serving")
        # The volume the manifest mounts at /models, here a directory with the files it names.
        mount = container["volumeMounts"][0]["mountPath"]
        models = os.path.join(self.dir, "models")
        for v in (1, 2):
            make_version(os.path.join(models, "gpt2"), v)
        with open(os.path.join(models, "models.config"), "w") as f:
            f.write("model_config_list { config { name: 'gpt2' base_path: '%s/gpt2' "
                    "model_platform: 'tensorflow' } }\n" % models)
        with open(os.path.join(models, "batching.config"), "w") as f:
            f.write("max_batch_size { value: 16 }\nbatch_timeout_micros { value: 1000 }\n"
                    "max_enqueued_batches { value: 64 }\nnum_batch_threads { value: 2 }\n")
        with open(os.path.join(models, "monitoring.config"), "w") as f:
            f.write("prometheus_config {\n  enable: true\n  path: '/metrics/tf'\n}\n")
        def remount(arg):  # a flag's value under the mount path points into the volume
            flag, _, value = arg.partition("=")
            if value.startswith(mount + "/"):
                value = models + value[len(mount):]
            return flag + "=" + value if value else flag

        args = [remount(a) for a in container["args"]]
        env = dict(os.environ, **{e["name"]: e["value"] for e in container["env"]})
        env["MODEL_BASE_PATH"] = models
        bindir = os.path.join(self.dir, "bin")  # the image: tokenflow as tensorflow_model_server
        os.makedirs(bindir)
        os.symlink(BIN, os.path.join(bindir, "tensorflow_model_server"))
        env["PATH"] = bindir + os.pathsep + env["PATH"]
        ports = {p["containerPort"]: free_port() for p in container["ports"]}
        log = open(os.path.join(self.dir, "log"), "w")
        # The image's ports are 8500 and 8501; here free ones are appended (the last value wins).
        proc = subprocess.Popen(
            ["bash", os.path.join(REPO, "scripts", "tf_serving_entrypoint.sh"), *args,
             "--port=%d" % ports[8500], "--rest_api_port=%d" % ports[8501],
             "--kv-cache-memory=16MiB"],
            stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        log.close()
        try:
            lines = [proc.stdout.readline() for _ in range(3)]
            with open(os.path.join(self.dir, "log")) as f:
                self.assertIn("gRPC on 0.0.0.0:%d" % ports[8500], lines[2], f.read())
            c = Client(ports[8501])
            probe = container["readinessProbe"]["httpGet"]
            status, body, _, _ = c.get(probe["path"])
            self.assertEqual(status, 200, body)
            self.assertEqual(body["model_version_status"][0]["state"], "AVAILABLE")
            with socket.create_connection(("127.0.0.1", ports[8500]), timeout=10):
                pass  # the liveness probe's TCP check
            status, body, text, _ = c.post(
                "/v1/models/gpt2:predict",
                {"instances": [{"input_ids": [1, 403, 407], "attention_mask": [1, 1, 1],
                                "max_new_tokens": 4}]})
            self.assertEqual(status, 200, text)
            self.assertEqual(len(body["predictions"][0]), 7)
            self.assertIn(":tensorflow:serving:request_count", c.get("/metrics/tf")[2])
        finally:
            code, err = stop_server(proc)
        with open(os.path.join(self.dir, "log")) as f:
            self.assertEqual(code, 0, f.read())

    def test_gpt2_t5_and_a_third_model_side_by_side_in_one_config(self):
        """Issue 51 item 5: the seed's configuration, a GPT-2 and a T5 beside another model in
        one model_config_list (model_platform 'tensorflow'), each with its own version policy;
        T5 through TF Serving's REST Predict (the generate signature: input_ids and
        attention_mask are the encoder's input, the answer the decoder's ids), gRPC Predict and
        the OpenAI completions API, its tokens numpy's."""
        sys.path.insert(0, os.environ.get("TF_REFERENCE_DIR",
                                          os.path.join(os.path.dirname(HERE), "reference")))
        import make_checkpoints
        import np_model
        from test_t5 import write_vocab
        models = os.path.join(self.dir, "models")
        for kind, name, versions in (("gpt2", "gpt2", (1, 2)), ("t5_v1_1", "t5", (3, 4))):
            for v in versions:
                d = make_checkpoints.write_checkpoint(os.path.join(models, name, str(v)), kind,
                                                      seed=v)
                write_vocab(os.path.join(d, "tokenizer.bin"),
                            make_checkpoints.KINDS[kind]("F32")["vocab_size"])
        # The seed's code model, 'codegen-2b': a CodeGen checkpoint as most of them exist, a
        # PyTorch pytorch_model.bin (issue 53).
        import safetensors_io
        import torch_io
        codegen = os.path.join(models, "codegen-2b", "1")
        make_checkpoints.write_checkpoint(codegen, "codegen", seed=5)
        torch_io.save(os.path.join(codegen, "pytorch_model.bin"), safetensors_io.load_dir(codegen))
        codegen_ref = np_model.load_hf(codegen)
        os.remove(os.path.join(codegen, "model.safetensors"))
        write_vocab(os.path.join(codegen, "tokenizer.bin"), codegen_ref.vocab_size)
        config = os.path.join(self.dir, "models.config")
        with open(config, "w") as f:
            f.write("model_config_list {\n"
                    "  config { name: 'gpt2' base_path: '%s/gpt2' model_platform: 'tensorflow'\n"
                    "           model_version_policy { latest { num_versions: 1 } } }\n"
                    "  config { name: 't5' base_path: '%s/t5' model_platform: 'tensorflow'\n"
                    "           model_version_policy { specific { versions: 3 } } }\n"
                    "  config { name: 'story' base_path: '%s' model_platform: 'tensorflow'\n"
                    "           model_version_policy { all {} } }\n"
                    "  config { name: 'codegen-2b' base_path: '%s/codegen-2b'\n"
                    "           model_platform: 'tensorflow' }\n"
                    "}\n" % (models, models, self.base, models))
        proc, _, (grpc_port, port) = self.start_on_free_ports("--model_config_file=" + config)
        try:
            c = Client(port)
            for name, want in (("gpt2", [("2", "AVAILABLE")]), ("t5", [("3", "AVAILABLE")]),
                               ("story", [("1", "AVAILABLE"), ("2", "AVAILABLE")])):
                status, body, _, _ = c.get("/v1/models/" + name)
                self.assertEqual(status, 200, body)
                self.assertEqual(sorted((v["version"], v["state"])
                                        for v in body["model_version_status"]), want, name)
            ref = np_model.load_hf(os.path.join(models, "t5", "3"))
            encoder = [5, 17, 300, 42, 9, 77, 11]
            want, _ = ref.greedy(encoder, 6)
            # REST Predict, the generate signature: left padding on the encoder's input; the
            # answer is the decoder's sequence from its start token, as T5's generate() returns.
            status, body, text, _ = c.post("/v1/models/t5/versions/3:predict", {"inputs": {
                "input_ids": [[0, 0] + encoder], "attention_mask": [[0, 0] + [1] * len(encoder)],
                "max_new_tokens": 6}})
            self.assertEqual(status, 200, text)
            self.assertEqual(body["outputs"], [[0] + want])
            # gRPC Predict, tokenflow's own signature: the token ids in, the output ids out.
            import grpc as grpc_mod
            from test_grpc import predict_pb2, prediction_service_pb2_grpc, tensor_pb2, types_pb2
            channel = grpc_mod.insecure_channel("127.0.0.1:%d" % grpc_port)
            req = predict_pb2.PredictRequest()
            req.model_spec.name = "t5"
            ids = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32)
            ids.tensor_shape.dim.add(size=1)
            ids.tensor_shape.dim.add(size=len(encoder))
            ids.int_val.extend(encoder)
            req.inputs["input_ids"].CopyFrom(ids)
            for key, dtype, field, value in (("max_tokens", types_pb2.DT_INT32, "int_val", 6),
                                             ("temperature", types_pb2.DT_FLOAT, "float_val", 0.0)):
                t = tensor_pb2.TensorProto(dtype=dtype)
                getattr(t, field).append(value)
                req.inputs[key].CopyFrom(t)
            r = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(req, timeout=60)
            self.assertEqual(list(r.outputs["output_ids"].int_val)[:6], want)
            self.assertEqual((r.model_spec.name, r.model_spec.version.value), ("t5", 3))
            channel.close()
            # The OpenAI completions API: the prompt is the encoder's input.
            status, body, text, _ = c.post("/v1/completions", {
                "model": "t5", "prompt": encoder, "max_tokens": 6, "temperature": 0})
            self.assertEqual(status, 200, text)
            self.assertEqual(body["choices"][0]["text"], "".join(" t%d" % t for t in want))
            self.assertEqual(body["usage"]["prompt_tokens"], len(encoder))
            # The code model: CodeGen's greedy tokens are numpy's.
            prompt = [5, 17, 300, 42]
            status, body, text, _ = c.post("/v1/models/codegen-2b:predict", {
                "instances": [{"input_ids": prompt, "attention_mask": [1] * 4,
                               "max_new_tokens": 8}]})
            self.assertEqual(status, 200, text)
            self.assertEqual(body["predictions"][0], prompt + np_model.greedy(codegen_ref, prompt, 8))
            # The models beside it answer as before.
            for name in ("gpt2", "story"):
                status, body, text, _ = c.post("/v1/models/%s:predict" % name, {
                    "instances": [{"input_ids": [1, 403, 407], "attention_mask": [1, 1, 1],
                                   "max_new_tokens": 4}]})
                self.assertEqual(status, 200, text)
                self.assertEqual(len(body["predictions"][0]), 7, name)
        finally:
            code, err = stop_server(proc)
        self.assertEqual(code, 0, err)

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
