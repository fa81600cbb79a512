"""Integration tests of the gRPC server's operation (`tokenflow serve --grpc-port`; the API itself:
test_grpc.py, whose stubs and helpers these share): API keys and per-key limits, slow readers
and flow control, config reloads under traffic, TLS, start-up failures and graceful shutdown.

Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import unittest

import grpc

from test_grpc import (BIN, C, MODEL, STORIES_BIN, g, g_grpc, get_model_metadata_pb2,
                       health_pb2, health_pb2_grpc, model_service_pb2_grpc, predict_pb2,
                       prediction_service_pb2_grpc, sampling, start, status_pb2, tensor,
                       types_pb2)
from tensorflow_serving.apis import model_management_pb2  # noqa: E402 (stubs from test_grpc)
from test_registry import make_version
from test_server import Client, self_signed_cert, stop_server, wait_for


class GrpcKeysAndLimitsTest(unittest.TestCase):
    """API keys from `authorization` metadata; 401/403/429/503/504 as gRPC codes."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tf_grpc_keys_")
        keys = os.path.join(cls.dir, "keys")
        with open(keys, "w") as f:
            f.write("sk-admin name=admin\n"
                    "sha256:%s name=limited rpm=2\n"
                    "sk-other name=other models=someothermodel\n"
                    % hashlib.sha256(b"sk-limited").hexdigest())
        cls.log = os.path.join(cls.dir, "server.log")
        cls.proc, port, cls.channel = start(
            "--api-keys-file", keys, "--max-num-seqs", "1", "--max-waiting-requests", "1",
            log=cls.log)
        cls.gen = g_grpc.GenerationServiceStub(cls.channel)
        cls.models = model_service_pb2_grpc.ModelServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)
        with open(cls.log) as f:
            log = f.read()
        shutil.rmtree(cls.dir, ignore_errors=True)
        for secret in ("sk-admin", "sk-limited", "sk-other"):
            assert secret not in log, "a key reached the logs"

    def call(self, key, req=None, method=None, **kw):
        md = [("authorization", "Bearer " + key)] if key else []
        req = req or g.GenerateRequest(text="Hi", sampling=sampling(max_tokens=2))
        return (method or self.gen.Generate)(req, metadata=md, **kw)

    def code(self, fn, *args, **kw):
        try:
            r = fn(*args, **kw)
            if hasattr(r, "__iter__") and not hasattr(r, "ListFields"):
                list(r)
            return C.OK, None
        except grpc.RpcError as e:
            return e.code(), e

    def test_keys(self):
        self.assertEqual(self.code(self.call, None)[0], C.UNAUTHENTICATED)
        self.assertEqual(self.code(self.call, "sk-wrong")[0], C.UNAUTHENTICATED)
        self.assertEqual(self.code(self.call, "sk-admin")[0], C.OK)
        self.assertEqual(self.code(self.call, "sk-other")[0], C.PERMISSION_DENIED)
        self.assertEqual(self.code(self.call, "sk-other", g.TokenizeRequest(text="x"),
                                   self.gen.Tokenize)[0], C.PERMISSION_DENIED)
        self.assertEqual(self.code(self.call, None, g.ListModelsRequest(),
                                   self.gen.ListModels)[0], C.UNAUTHENTICATED)
        self.assertEqual(self.code(self.call, None, status_pb2.GetModelStatusRequest(
            model_spec={"name": MODEL}), self.models.GetModelStatus)[0], C.UNAUTHENTICATED)
        # Health is open, as /healthz is.
        h = health_pb2_grpc.HealthStub(self.channel)
        self.assertEqual(h.Check(health_pb2.HealthCheckRequest(service=MODEL)).status,
                         health_pb2.HealthCheckResponse.SERVING)

    def test_every_method_checks_the_key_before_anything_else(self):
        # Issue 49: the key's model list is checked before the model is looked up and before
        # anything of the request is decoded, on every method: a key held to another model
        # gets PERMISSION_DENIED for an existing model and a missing one alike (before, a
        # missing one was NOT_FOUND, GetModelMetadata answered at all, and Predict decoded its
        # tensors first: the 40-byte overflowing shape crashed the server for any valid key).
        T = types_pb2
        prediction = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)

        def predict(model):
            r = predict_pb2.PredictRequest()
            r.model_spec.name = model
            r.inputs["input_ids"].CopyFrom(tensor(T.DT_INT32, shape=[1 << 62, 4]))
            return prediction.Predict, r

        calls = {
            "Generate": lambda m: (self.gen.Generate, g.GenerateRequest(model=m, text="Hi")),
            "GenerateStream": lambda m: (self.gen.GenerateStream,
                                         g.GenerateRequest(model=m, text="Hi")),
            "Tokenize": lambda m: (self.gen.Tokenize, g.TokenizeRequest(model=m, text="x")),
            "Detokenize": lambda m: (self.gen.Detokenize,
                                     g.DetokenizeRequest(model=m, token_ids=[1, 2])),
            "Predict": predict,
            "GetModelMetadata": lambda m: (prediction.GetModelMetadata,
                                           get_model_metadata_pb2.GetModelMetadataRequest(
                                               model_spec={"name": m},
                                               metadata_field=["signature_def"])),
            "GetModelStatus": lambda m: (self.models.GetModelStatus,
                                         status_pb2.GetModelStatusRequest(model_spec={"name": m})),
        }
        for name, make in calls.items():
            for model in (MODEL, "nope"):
                method, req = make(model)
                md = [("authorization", "Bearer sk-other")]
                code, e = self.code(method, req, metadata=md)
                self.assertEqual(code, C.PERMISSION_DENIED, (name, model, e and e.details()))
                self.assertIn("may not use model '%s'" % model, e.details())
            # The control: a key that may use every model is told what exists.
            method, req = make("nope")
            code, e = self.code(method, req, metadata=[("authorization", "Bearer sk-admin")])
            self.assertEqual(code, C.NOT_FOUND, (name, e and e.details()))
        method, req = predict(MODEL)
        code, e = self.code(method, req, metadata=[("authorization", "Bearer sk-admin")])
        self.assertEqual(code, C.INVALID_ARGUMENT, e and e.details())  # decoded, then refused
        self.assertEqual(self.code(self.call, "sk-admin")[0], C.OK)  # and the server is up

    def test_rate_limit_is_resource_exhausted(self):
        codes = [self.code(self.call, "sk-limited")[0] for _ in range(4)]
        self.assertEqual(codes[:2], [C.OK, C.OK])
        self.assertEqual(codes[2], C.RESOURCE_EXHAUSTED)
        _, e = self.code(self.call, "sk-limited")
        md = dict(e.trailing_metadata())
        self.assertGreaterEqual(int(md["retry-after"]), 1)
        self.assertEqual(md["error-code"], "rate_limit_exceeded")

    def test_server_timeout_is_deadline_exceeded(self):
        proc, port, channel = start("--request-timeout", "0.05")
        try:
            gen = g_grpc.GenerationServiceStub(channel)
            long = g.GenerateRequest(text="Once", sampling=sampling(max_tokens=480, n=8,
                                                                    ignore_eos=True))
            # The server stops it; a stream gets what was made (aborted), then the code.
            code, e = self.code(gen.Generate, long)
            self.assertEqual(code, C.DEADLINE_EXCEEDED, e and e.details())
            self.assertIn("deadline", e.details())
            steps, code = [], None
            try:
                for m in gen.GenerateStream(long):
                    steps.append(m)
            except grpc.RpcError as err:
                code = err.code()
            self.assertEqual(code, C.DEADLINE_EXCEEDED)
            self.assertIn(g.FINISH_REASON_ABORT, [m.step.finish_reason for m in steps])
            # Predict ends the same way over gRPC and REST (issue 19: it answered OK / 200 with
            # finish_reason "abort").
            T = types_pb2
            req = predict_pb2.PredictRequest()
            req.model_spec.name = MODEL
            req.inputs["prompt"].CopyFrom(tensor(T.DT_STRING, [b"Once"] * 8))
            req.inputs["max_tokens"].CopyFrom(tensor(T.DT_INT32, [480], []))
            req.inputs["ignore_eos"].CopyFrom(tensor(T.DT_BOOL, [True], []))
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            code, e = self.code(stub.Predict, req)
            self.assertEqual(code, C.DEADLINE_EXCEEDED, e and e.details())
            self.assertIn("deadline", e.details())
            status, body, text, _ = Client(port).post(
                "/v1/models/%s:predict" % MODEL,
                {"instances": [{"prompt": "Once", "max_tokens": 480, "ignore_eos": True}] * 8})
            self.assertEqual(status, 504, text)
            self.assertIn("deadline", body["error"])
        finally:
            channel.close()
            stop_server(proc)

    def test_overload_is_unavailable(self):
        # One sequence runs at a time and one may wait: a burst overfills the queue.
        req = g.GenerateRequest(text="Once", sampling=sampling(max_tokens=480, ignore_eos=True))
        codes = []

        def one():
            codes.append(self.code(self.call, "sk-admin", req)[0])

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertIn(C.UNAVAILABLE, codes)
        self.assertIn(C.OK, codes)
        self.assertTrue(set(codes) <= {C.UNAVAILABLE, C.OK}, codes)


class SlowReaderTest(unittest.TestCase):
    """Issue 49: a streaming client that never reads grew server memory without bound (about
    0.7 MiB/s a stream with logprobs; the per-write timeout never trips for a trickle). Past
    --max-unsent-bytes of unread output an SSE or gRPC stream is ended, its request cancelled,
    and the count is in the stats and metrics."""

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.port, cls.channel = start("--max-unsent-bytes", "65536")
        cls.c = Client(cls.port)
        cls.gen = g_grpc.GenerationServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def stats(self):
        return self.c.get("/v1/admin/stats")[1]

    def idle(self):
        m = self.stats()["models"][MODEL]
        return m["running"] == 0 and m["waiting"] == 0 and m["kv_blocks_used"] == 0

    def test_sse_and_grpc_streams_of_slow_readers_are_ended(self):
        import socket
        # 32 x 480 tokens with 20 logprobs each: tens of MB of events, far more than the
        # kernel's socket buffers hold and the 64 KiB allowed to wait in the server.
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 480, "n": 32,
                           "logprobs": 20, "ignore_eos": True, "stream": True}).encode()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        s.connect(("127.0.0.1", self.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        # Never read: the stream is ended once 64 KiB wait, and its sequences are gone.
        self.assertTrue(wait_for(lambda: self.stats()["slow_reader_streams"] >= 1, 60))
        self.assertTrue(wait_for(self.idle, 60))
        generated = self.stats()["models"][MODEL]["generated_tokens"]
        self.assertLess(generated, 32 * 480, "cancelled, not run to the end")
        s.close()
        # gRPC: the same request, its messages left unread.
        req = g.GenerateRequest(text="Once upon a time", sampling=sampling(
            max_tokens=480, n=32, logprobs=20, ignore_eos=True))
        stream = self.gen.GenerateStream(req)
        self.assertTrue(wait_for(lambda: self.stats()["slow_reader_streams"] >= 2, 60))
        with self.assertRaises(grpc.RpcError) as e:
            for _ in stream:
                pass
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("too slowly", e.exception.details())
        self.assertTrue(wait_for(self.idle, 60))
        metrics = self.c.get("/metrics")[2]
        self.assertIn("tokenflow_slow_reader_streams_total 2", metrics)
        # A reader that keeps up is not affected.
        status, b, text, _ = self.c.post("/v1/completions", {
            "prompt": "Once", "max_tokens": 64, "n": 2, "logprobs": 5})
        self.assertEqual(status, 200, text)


class GrpcReloadTest(unittest.TestCase):
    """HandleReloadConfigRequest with TF Serving's ModelServerConfig; health follows it."""

    def test_reload_config_and_health(self):
        d = tempfile.mkdtemp(prefix="tf_grpc_reload_")
        try:
            for name in ("alpha", "beta"):
                make_version(os.path.join(d, name), 1)
            config = os.path.join(d, "models.config")
            with open(config, "w") as f:
                f.write('model_config_list { config { name: "alpha" base_path: "%s" } }\n'
                        % os.path.join(d, "alpha"))
            proc, _, channel = start("--model_config_file", config,
                                     "--allow-config-reload-body", "--model-root", d,
                                     log=os.path.join(d, "server.log"))
            try:
                models = model_service_pb2_grpc.ModelServiceStub(channel)
                gen = g_grpc.GenerationServiceStub(channel)
                h = health_pb2_grpc.HealthStub(channel)
                S = health_pb2.HealthCheckResponse

                def health(name):
                    try:
                        return h.Check(health_pb2.HealthCheckRequest(service=name)).status
                    except grpc.RpcError as e:
                        return e.code()

                self.assertEqual(health("alpha"), S.SERVING)
                self.assertEqual(health("beta"), C.NOT_FOUND)
                req = model_management_pb2.ReloadConfigRequest()
                for name in ("alpha", "beta"):
                    c = req.config.model_config_list.config.add()
                    c.name = name
                    c.base_path = os.path.join(d, name)
                    c.model_platform = "tokenflow"
                r = models.HandleReloadConfigRequest(req, timeout=60)
                self.assertEqual(r.status.error_code, 0)
                st = models.GetModelStatus(status_pb2.GetModelStatusRequest(
                    model_spec={"name": "beta"}))
                self.assertEqual(st.model_version_status[0].state,
                                 status_pb2.ModelVersionStatus.AVAILABLE)
                out = gen.Generate(g.GenerateRequest(model="beta", text="Once",
                                                     sampling=sampling(max_tokens=3)))
                self.assertEqual(out.model, "beta")
                self.assertTrue(wait_for(lambda: health("beta") == S.SERVING))

                # An invalid config changes nothing.
                bad = model_management_pb2.ReloadConfigRequest()
                c = bad.config.model_config_list.config.add()
                c.name = "gamma"  # no base_path
                try:
                    models.HandleReloadConfigRequest(bad, timeout=30)
                    self.fail("an invalid config was accepted")
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), C.INVALID_ARGUMENT)
                    self.assertIn("base_path", e.details())
                self.assertEqual(len(gen.ListModels(g.ListModelsRequest()).models), 2)

                # Removing beta: its versions end, health says NOT_SERVING.
                keep = model_management_pb2.ReloadConfigRequest()
                keep.config.model_config_list.config.add(name="alpha",
                                                         base_path=os.path.join(d, "alpha"))
                models.HandleReloadConfigRequest(keep, timeout=60)
                self.assertTrue(wait_for(lambda: health("beta") == S.NOT_SERVING))
                self.assertEqual(health("alpha"), S.SERVING)
                e = None
                try:
                    gen.Generate(g.GenerateRequest(model="beta", text="x"))
                except grpc.RpcError as err:
                    e = err
                self.assertEqual(e.code(), C.NOT_FOUND)
                # An empty request re-reads the config file (alpha only).
                r = models.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest())
                self.assertEqual(r.status.error_code, 0)
            finally:
                channel.close()
                rc, _ = stop_server(proc)
            self.assertEqual(rc, 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)


class GrpcTlsTest(unittest.TestCase):
    def test_tls_with_the_https_certificate(self):
        d = tempfile.mkdtemp(prefix="tf_grpc_tls_")
        self.addCleanup(shutil.rmtree, d, True)
        cert, key = self_signed_cert(d)
        proc, _, channel = start("--tls-cert", cert, "--tls-key", key, ca=cert)
        try:
            gen = g_grpc.GenerationServiceStub(channel)
            r = gen.Generate(g.GenerateRequest(text="Once", sampling=sampling(max_tokens=4)))
            self.assertEqual(r.usage.completion_tokens, 4)
            # A plaintext client gets nowhere.
            plain = grpc.insecure_channel("127.0.0.1:%d" % proc.grpc_port)
            with self.assertRaises(grpc.RpcError) as cm:
                g_grpc.GenerationServiceStub(plain).ListModels(g.ListModelsRequest(), timeout=3)
            self.assertEqual(cm.exception.code(), C.UNAVAILABLE)
            plain.close()
        finally:
            channel.close()
            stop_server(proc)


class GrpcStartTest(unittest.TestCase):
    def test_a_taken_or_invalid_port_is_a_clear_error(self):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            p = subprocess.run([BIN, "serve", "-m", STORIES_BIN, "--port", "0", "--grpc-port",
                                str(port), "--kv-cache-memory", "16MiB"],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot listen for gRPC on 127.0.0.1:%d" % port, p.stderr)
        p = subprocess.run([BIN, "serve", "-m", STORIES_BIN, "--grpc-port", "70000"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("--grpc-port must be in 0..65535", p.stderr)

    def test_the_last_grpc_port_given_wins(self):
        # scripts/run.sh passes --grpc-port 8500 before the user's own arguments.
        proc, _, channel = start("--grpc-port", "0")
        try:
            gen = g_grpc.GenerationServiceStub(channel)
            self.assertEqual(len(gen.ListModels(g.ListModelsRequest()).models), 1)
        finally:
            channel.close()
            stop_server(proc)


class GrpcShutdownTest(unittest.TestCase):
    def test_sigterm_lets_streams_finish_and_refuses_new_calls(self):
        proc, _, channel = start()
        gen = g_grpc.GenerationServiceStub(channel)
        h = health_pb2_grpc.HealthStub(channel)
        # 8 x 480 tokens: about half a second, still running when the signal comes.
        call = gen.GenerateStream(g.GenerateRequest(
            text="Once", sampling=sampling(max_tokens=480, n=8, ignore_eos=True)))
        first = next(call)
        self.assertEqual(first.WhichOneof("event"), "step")
        # The rest is read as it comes, as a client would: a client that stops reading fills
        # the connection's window, and what the server still holds when it exits is lost with
        # the connection (seen under load: "Connection reset by peer"; docs/status.md).
        rest = []
        reader = threading.Thread(target=lambda: rest.extend(call))
        reader.start()
        proc.send_signal(signal.SIGTERM)
        # Health says NOT_SERVING (or the server has stopped listening); new calls are refused.
        def refused():
            try:
                st = h.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
                return st == health_pb2.HealthCheckResponse.NOT_SERVING
            except grpc.RpcError as e:
                return e.code() == C.UNAVAILABLE
        self.assertTrue(wait_for(refused, 10))
        # The stream in progress finishes whole.
        reader.join(60)
        self.assertFalse(reader.is_alive())
        self.assertEqual(rest[-1].WhichOneof("event"), "end")
        self.assertEqual(rest[-1].end.usage.completion_tokens, 8 * 480)
        channel.close()
        rc, err = stop_server(proc)
        self.assertEqual(rc, 0, err[-2000:])


if __name__ == "__main__":
    unittest.main()
