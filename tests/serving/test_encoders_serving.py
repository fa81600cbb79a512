"""Encoders served (issue 52): /v1/embeddings, /v1/rerank (and /rerank, /v2/rerank), /score and
/classify on BERT-family models, against the numpy encoder (tests/reference/np_model.Bert).

One server with random-weight models from make_checkpoints: an embedding model (BERT,
sentence-transformers' mean pooling and Normalize), a reranker (a cross-encoder with one label)
and a 3-label classifier, each with a WordPiece vocab.txt; a NomicBERT that declares Matryoshka
dimensions; and one GPT-2 (GPT-2's real tokenizer) served three ways: as it is (generate and
embed, its sentence-transformers files saying mean pooling), as a yes/no reranker
(--task judge=score, Qwen3-Reranker's prompt and P(yes)) and as an embedder only
(--task embed). Every score and vector is numpy's; requests of many inputs come back in order;
what a model cannot do is a 400 naming its tasks."""

import json
import os
import re
import shutil
import sys
import tempfile
import unittest

import numpy as np

from test_server import Client, start_server, stop_server

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TF_REFERENCE_DIR",
                                  os.path.join(os.path.dirname(HERE), "reference")))
import make_checkpoints  # noqa: E402
import np_model  # noqa: E402
import safetensors_io  # noqa: E402
from test_encoders import write_bert_vocab  # noqa: E402


SHARED = os.path.join(HERE, "..", "..", "..", "shared")


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class EncoderServingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tf_enc_srv_")
        make_checkpoints.KINDS["bert_rank"] = lambda dt: make_checkpoints._scaled(
            make_checkpoints.KINDS["bert_cls"](dt), id2label={"0": "LABEL_0"},
            label2id={"LABEL_0": 0})
        cls.dirs, cls.refs = {}, {}
        for name, kind in (("embed", "bert"), ("rank", "bert_rank"), ("sentiment", "bert_cls")):
            d = make_checkpoints.write_checkpoint(os.path.join(cls.tmp, name), kind, seed=7)
            cls.vocab = write_bert_vocab(os.path.join(d, "vocab.txt"), 300)
            cls.dirs[name], cls.refs[name] = d, np_model.load_hf(d)
        d = cls.dirs["embed"]
        with open(os.path.join(d, "modules.json"), "w") as f:
            json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                       {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                       {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}], f)
        os.makedirs(os.path.join(d, "1_Pooling"))
        with open(os.path.join(d, "1_Pooling", "config.json"), "w") as f:
            json.dump({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}, f)
        # NomicBERT, Matryoshka: 16 and 32 of its 48 dimensions are embeddings too.
        make_checkpoints.KINDS["nomic_mrl"] = lambda dt: make_checkpoints._scaled(
            make_checkpoints.KINDS["nomic"](dt), matryoshka_dimensions=[16, 32])
        d = make_checkpoints.write_checkpoint(os.path.join(cls.tmp, "nomic"), "nomic_mrl", seed=7)
        write_bert_vocab(os.path.join(d, "vocab.txt"), 300)
        cls.dirs["nomic"], cls.refs["nomic"] = d, np_model.load_hf(d)
        # GPT-2 over GPT-2's tokenizer, its sentence-transformers files saying mean pooling.
        d = os.path.join(cls.tmp, "gen")
        os.makedirs(d)
        cfg = make_checkpoints._scaled(make_checkpoints._gpt2_config("F32"), vocab_size=50257,
                                       bos_token_id=50256, eos_token_id=50256, n_ctx=256,
                                       n_positions=256, n_layer=2)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        safetensors_io.save(os.path.join(d, "model.safetensors"),
                            make_checkpoints._gpt2_weights(cfg, np.random.default_rng(3), False), "F32")
        shutil.copy(os.path.join(SHARED, "tokenizers", "gpt2", "tokenizer.json"), d)
        with open(os.path.join(d, "modules.json"), "w") as f:
            json.dump([{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}], f)
        os.makedirs(os.path.join(d, "1_Pooling"))
        with open(os.path.join(d, "1_Pooling", "config.json"), "w") as f:
            json.dump({"pooling_mode_mean_tokens": True}, f)
        cls.gen_dir, cls.gen = d, np_model.load_hf(d)
        flags = []
        for name, d in cls.dirs.items():
            flags += ["--model", "%s=%s" % (name, d)]
        for name in ("gen", "judge", "onlyembed"):
            flags += ["--model", "%s=%s" % (name, cls.gen_dir)]
        cls.proc, port = start_server("--threads", "1", "--task", "judge=score",
                                      "--task", "onlyembed=embed", "--grpc-port", "0", model=flags)
        cls.c = Client(port)
        cls.grpc_port = None
        for _ in range(4):
            m = re.search(r"gRPC on 127\.0\.0\.1:(\d+)", cls.proc.stdout.readline())
            if m:
                cls.grpc_port = int(m.group(1))
                break

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.proc)
        shutil.rmtree(cls.tmp)

    def ids(self, text):
        return [self.vocab["[CLS]"]] + [self.vocab[w] for w in text.split()] + [self.vocab["[SEP]"]]

    def pair(self, a, b):
        ia, ib = self.ids(a), self.ids(b)[1:]
        return ia + ib, [0] * len(ia) + [1] * len(ib)

    def post(self, path, body, status=200):
        st, out, text, _ = self.c.post(path, body)
        self.assertEqual(st, status, text)
        return out

    def test_embeddings_pool_as_the_model_says(self):
        texts = ["the cat sat on the mat", "a dog ran", "query about cats and dogs"]
        out = self.post("/v1/embeddings", {"model": "embed", "input": texts})
        self.assertEqual([d["index"] for d in out["data"]], [0, 1, 2])
        ref = self.refs["embed"]
        for t, d in zip(texts, out["data"]):
            m = ref.hidden(self.ids(t)).mean(0)  # the model's mean pooling, normalized
            np.testing.assert_allclose(d["embedding"], m / np.linalg.norm(m), rtol=0, atol=1e-5)
        self.assertEqual(out["usage"]["prompt_tokens"], sum(len(self.ids(t)) for t in texts))
        # Asked for: CLS, unnormalized, from token ids.
        ids = self.ids("the house is small")
        out = self.post("/v1/embeddings", {"model": "embed", "input": [ids], "pooling": "cls",
                                           "normalize": False})
        np.testing.assert_allclose(out["data"][0]["embedding"], ref.hidden(ids)[0], rtol=0, atol=2e-4)
        # The whole context (64) is the limit: 64 tokens pass, 65 do not.
        ok = self.post("/v1/embeddings", {"model": "embed", "input": [[5] * 64]})
        self.assertEqual(len(ok["data"][0]["embedding"]), 48)
        err = self.post("/v1/embeddings", {"model": "embed", "input": [[5] * 65]}, 400)
        self.assertEqual(err["error"]["code"], "context_length_exceeded")

    def test_rerank_orders_documents_by_relevance(self):
        query = "query about cats"
        docs = ["the cat sat on the mat", "a dog ran", "cats and dogs", "the house is small"]
        ref = self.refs["rank"]
        want = [float(sigmoid(ref.scores(*self.pair(query, d))[0])) for d in docs]
        order = sorted(range(len(docs)), key=lambda i: -want[i])
        for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
            out = self.post(path, {"model": "rank", "query": query, "documents": docs})
            self.assertEqual([r["index"] for r in out["results"]], order, path)
            for r in out["results"]:
                self.assertAlmostEqual(r["relevance_score"], want[r["index"]], delta=1e-5)
                self.assertEqual(r["document"]["text"], docs[r["index"]])
        out = self.post("/v1/rerank", {"model": "rank", "query": query, "top_n": 2,
                                       "return_documents": False,
                                       "documents": [{"text": d} for d in docs]})
        self.assertEqual([r["index"] for r in out["results"]], order[:2])
        self.assertNotIn("document", out["results"][0])

    def test_score_pairs_and_classify(self):
        ref = self.refs["rank"]
        out = self.post("/score", {"model": "rank", "text_1": "query about cats",
                                   "text_2": ["cats and dogs", "a dog ran"]})
        for d, t in zip(out["data"], ["cats and dogs", "a dog ran"]):
            self.assertAlmostEqual(d["score"], float(sigmoid(ref.scores(*self.pair("query about cats", t))[0])),
                                   delta=1e-5)
        out = self.post("/v1/score", {"model": "rank", "text_1": ["the cat", "a dog"],
                                      "text_2": ["sat", "ran"]})
        self.assertAlmostEqual(out["data"][1]["score"], float(sigmoid(ref.scores(*self.pair("a dog", "ran"))[0])),
                               delta=1e-5)
        self.post("/score", {"model": "rank", "text_1": ["a", "b"], "text_2": ["c", "d", "the"]}, 400)
        ref = self.refs["sentiment"]
        texts = ["the house is big", "a dog ran"]
        out = self.post("/classify", {"model": "sentiment", "input": texts})
        for t, d in zip(texts, out["data"]):
            s = ref.scores(self.ids(t))
            p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            np.testing.assert_allclose(d["probs"], p, rtol=0, atol=1e-5)
            self.assertEqual(d["label"], ["negative", "neutral", "positive"][int(np.argmax(p))])
            self.assertEqual(d["num_classes"], 3)

    def test_tf_serving_classify_and_regress(self):
        # TF Serving's Classify: [[label, probability], ...] per example; Regress: the one-output
        # head's value; the context's features under each example's (here the query).
        ref = self.refs["sentiment"]
        out = self.post("/v1/models/sentiment:classify",
                        {"examples": [{"text": "the house is big"}, {"text": ["a dog ran"]}]})
        for t, row in zip(["the house is big", "a dog ran"], out["result"]):
            s = ref.scores(self.ids(t))
            p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            self.assertEqual([label for label, _ in row], ["negative", "neutral", "positive"])
            np.testing.assert_allclose([v for _, v in row], p, rtol=0, atol=1e-5)
        ref = self.refs["rank"]
        out = self.post("/v1/models/rank/versions/1:regress",
                        {"context": {"text": "query about cats"},
                         "examples": [{"text_pair": "cats and dogs"}, {"text_pair": "a dog ran"}]})
        for d, v in zip(["cats and dogs", "a dog ran"], out["result"]):
            self.assertAlmostEqual(v, float(ref.scores(*self.pair("query about cats", d))[0]), delta=2e-4)
        for path, body in (("/v1/models/sentiment:regress", {"examples": [{"text": "a"}]}),
                           ("/v1/models/embed:classify", {"examples": [{"text": "a"}]}),
                           ("/v1/models/sentiment:classify", {"examples": []}),
                           ("/v1/models/sentiment:classify", {"examples": [{"label": "a"}]}),
                           ("/v1/models/sentiment:classify", {"instances": [{"text": "a"}]})):
            st, err, text, _ = self.c.post(path, body)
            self.assertEqual(st, 400, (path, body, text))
            self.assertIn("error", err)

    def test_matryoshka_dimensions_where_the_config_declares_them(self):
        ref = self.refs["nomic"]
        ids = [[int(t) for t in np.random.default_rng(k).integers(5, 300, size=n)]
               for k, n in enumerate((3, 20, 64))]
        full = self.post("/v1/embeddings", {"model": "nomic", "input": ids, "pooling": "mean"})
        cut = self.post("/v1/embeddings", {"model": "nomic", "input": ids, "pooling": "mean",
                                           "dimensions": 16})
        for i, (f, c) in enumerate(zip(full["data"], cut["data"])):
            m = ref.hidden(ids[i]).mean(0)
            np.testing.assert_allclose(f["embedding"], m / np.linalg.norm(m), rtol=0, atol=1e-5)
            np.testing.assert_allclose(c["embedding"], m[:16] / np.linalg.norm(m[:16]), rtol=0, atol=1e-5)
        self.post("/v1/embeddings", {"model": "nomic", "input": ids, "dimensions": 48})
        err = self.post("/v1/embeddings", {"model": "nomic", "input": "x", "dimensions": 20}, 400)
        self.assertIn("16, 32, 48", err["error"]["message"])
        err = self.post("/v1/embeddings", {"model": "embed", "input": "the cat", "dimensions": 16}, 400)
        self.assertIn("declares no Matryoshka", err["error"]["message"])
        # Ollama's /api/embed cuts the same way (its vectors always unit length).
        out = self.post("/api/embed", {"model": "nomic", "input": ["the cat sat"], "dimensions": 32})
        m = ref.hidden(self.ids("the cat sat"))[0][:32]  # its CLS (no pooling in its files)
        np.testing.assert_allclose(out["embeddings"][0], m / np.linalg.norm(m), rtol=0, atol=1e-5)

    def tokenize(self, model, text):
        return self.post("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})["tokens"]

    def test_a_generator_as_yes_no_reranker(self):
        # Qwen3-Reranker's prompt, written here from its model card; the relevance is P(yes)
        # against P(no) after it, from numpy's GPT-2.
        query, docs = "what is a cat", ["A cat is a small animal.", "Stocks fell today.", "Cats purr."]
        system = ('<|im_start|>system\nJudge whether the Document meets the requirements based on '
                  'the Query and the Instruct provided. Note that the answer can only be "yes" or '
                  '"no".<|im_end|>\n<|im_start|>user\n')
        suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        yes, no = self.tokenize("gen", "yes"), self.tokenize("gen", "no")
        self.assertEqual((len(yes), len(no)), (1, 1))

        def relevance(text):
            last = self.gen.logits(self.tokenize("gen", text))[-1]
            return float(sigmoid(last[yes[0]] - last[no[0]]))

        def prompt(q, d, instruction="Given a web search query, retrieve relevant passages that answer the query"):
            return system + "<Instruct>: %s\n<Query>: %s\n<Document>: %s" % (instruction, q, d) + suffix

        want = [relevance(prompt(query, d)) for d in docs]
        out = self.post("/v1/rerank", {"model": "judge", "query": query, "documents": docs})
        self.assertEqual([r["index"] for r in out["results"]], sorted(range(3), key=lambda i: -want[i]))
        for r in out["results"]:
            self.assertAlmostEqual(r["relevance_score"], want[r["index"]], delta=1e-4)
        out = self.post("/score", {"model": "judge", "text_1": query, "text_2": docs[1],
                                   "instruction": "Find finance news"})
        self.assertAlmostEqual(out["data"][0]["score"],
                               relevance(prompt(query, docs[1], "Find finance news")), delta=1e-4)
        # A query the client formatted itself (vLLM's examples) is taken as it is.
        pre = system + "<Instruct>: x\n<Query>: %s\n" % query
        out = self.post("/score", {"model": "judge", "text_1": pre,
                                   "text_2": "<Document>: %s%s" % (docs[0], suffix)})
        self.assertAlmostEqual(out["data"][0]["score"], relevance(prompt(query, docs[0], "x")), delta=1e-4)
        # TF Serving's :regress gives the same relevance.
        out = self.post("/v1/models/judge:regress",
                        {"context": {"text": query}, "examples": [{"text_pair": docs[2]}]})
        self.assertAlmostEqual(out["result"][0], want[2], delta=1e-4)
        # Its truncation keeps the prompt's end (vLLM's truncate_prompt_tokens).
        ids = self.tokenize("gen", prompt(query, docs[0]))
        out = self.post("/score", {"model": "judge", "text_1": query, "text_2": docs[0],
                                   "truncate_prompt_tokens": 20})
        last = self.gen.logits(ids[-20:])[-1]
        self.assertAlmostEqual(out["data"][0]["score"], float(sigmoid(last[yes[0]] - last[no[0]])), delta=1e-4)
        self.assertEqual(out["usage"]["prompt_tokens"], 20)

    def test_tasks_from_config_and_from_task(self):
        # The generator embeds with its files' mean pooling by default.
        mean = self.post("/v1/embeddings", {"model": "gen", "input": "the cat sat", "pooling": "mean"})
        default = self.post("/v1/embeddings", {"model": "gen", "input": "the cat sat"})
        last = self.post("/v1/embeddings", {"model": "gen", "input": "the cat sat", "pooling": "last"})
        self.assertEqual(default["data"][0]["embedding"], mean["data"][0]["embedding"])
        self.assertNotEqual(default["data"][0]["embedding"], last["data"][0]["embedding"])
        self.post("/v1/completions", {"model": "gen", "prompt": "the cat", "max_tokens": 2})
        self.post("/v1/embeddings", {"model": "onlyembed", "input": "the cat sat"})
        for path, body, model, task, tasks in (
                ("/v1/completions", {"prompt": "the cat", "max_tokens": 2}, "onlyembed", "generate", "embed"),
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, "judge", "generate", "score"),
                ("/v1/embeddings", {"input": "the cat"}, "judge", "embed", "score"),
                ("/v1/rerank", {"query": "a", "documents": ["b"]}, "gen", "score", "generate, embed"),
                ("/classify", {"input": "a"}, "judge", "classify", "score"),
                ("/v1/rerank", {"query": "a", "documents": ["b"]}, "embed", "score", "embed"),
                ("/v1/completions", {"prompt": "the cat", "max_tokens": 2}, "embed", "generate", "embed"),
                ("/v1/completions", {"prompt": "the cat", "max_tokens": 2}, "rank", "generate", "score, classify"),
                ("/v1/embeddings", {"input": "the cat"}, "sentiment", "embed", "score, classify")):
            err = self.post(path, dict(body, model=model), 400)
            self.assertIn("model '%s' does not %s (its tasks: %s;" % (model, task, tasks),
                          err["error"]["message"], path)
        st, out, text, _ = self.c.post("/v1/models/onlyembed:predict", {"instances": ["a"]})
        self.assertEqual(st, 400, text)
        self.assertIn("does not generate", text)
        st, out, text, _ = self.c.post("/api/show", {"model": "onlyembed"})
        self.assertEqual(out["capabilities"], ["embedding"], text)

    def test_tf_serving_grpc_classify_and_regress(self):
        # PredictionService.Classify / .Regress over tf.Examples (bytes features), as TF
        # Serving's clients send them; the same numbers as REST's.
        import grpc
        import test_grpc  # noqa: F401 (the stubs, generated from the repository's protos)
        from tensorflow_serving.apis import classification_pb2, input_pb2, model_pb2
        from tensorflow_serving.apis import prediction_service_pb2_grpc, regression_pb2
        from tensorflow.core.example import example_pb2, feature_pb2
        self.assertIsNotNone(self.grpc_port)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(
            grpc.insecure_channel("127.0.0.1:%d" % self.grpc_port))

        def example(**features):
            return example_pb2.Example(features=feature_pb2.Features(feature={
                k: feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=[v.encode()]))
                for k, v in features.items()}))

        texts = ["the house is big", "a dog ran"]
        req = classification_pb2.ClassificationRequest(
            model_spec=model_pb2.ModelSpec(name="sentiment"),
            input=input_pb2.Input(example_list=input_pb2.ExampleList(
                examples=[example(text=t) for t in texts])))
        resp = stub.Classify(req, timeout=60)
        self.assertEqual(resp.model_spec.name, "sentiment")
        ref = self.refs["sentiment"]
        for t, c in zip(texts, resp.result.classifications):
            s = ref.scores(self.ids(t))
            p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            self.assertEqual([k.label for k in c.classes], ["negative", "neutral", "positive"])
            np.testing.assert_allclose([k.score for k in c.classes], p, rtol=0, atol=1e-5)
        docs = ["cats and dogs", "a dog ran"]
        req = regression_pb2.RegressionRequest(
            model_spec=model_pb2.ModelSpec(name="rank"),
            input=input_pb2.Input(example_list_with_context=input_pb2.ExampleListWithContext(
                context=example(text="query about cats"),
                examples=[example(text_pair=d) for d in docs])))
        resp = stub.Regress(req, timeout=60)
        ref = self.refs["rank"]
        for d, r in zip(docs, resp.result.regressions):
            self.assertAlmostEqual(r.value, float(ref.scores(*self.pair("query about cats", d))[0]), delta=2e-4)
        # What it cannot do: INVALID_ARGUMENT naming it; an unknown model NOT_FOUND.
        for rpc, req, code, text in (
                (stub.Classify, classification_pb2.ClassificationRequest(
                    model_spec=model_pb2.ModelSpec(name="embed"),
                    input=input_pb2.Input(example_list=input_pb2.ExampleList(examples=[example(text="a")]))),
                 grpc.StatusCode.INVALID_ARGUMENT, "does not classify"),
                (stub.Regress, regression_pb2.RegressionRequest(
                    model_spec=model_pb2.ModelSpec(name="rank"), input=input_pb2.Input()),
                 grpc.StatusCode.INVALID_ARGUMENT, "Input is empty"),
                (stub.Classify, classification_pb2.ClassificationRequest(
                    model_spec=model_pb2.ModelSpec(name="nope"),
                    input=input_pb2.Input(example_list=input_pb2.ExampleList(examples=[example(text="a")]))),
                 grpc.StatusCode.NOT_FOUND, "")):
            with self.assertRaises(grpc.RpcError) as cm:
                rpc(req, timeout=60)
            self.assertEqual(cm.exception.code(), code, cm.exception.details())
            self.assertIn(text, cm.exception.details())

    def test_what_a_model_cannot_do_is_a_400_naming_it(self):
        for body, param in (({"model": "rank", "documents": ["a"]}, "query"),
                            ({"model": "rank", "query": "a", "documents": []}, "documents"),
                            ({"model": "rank", "query": "a", "documents": [1]}, "documents"),
                            ({"model": "rank", "query": "a", "documents": ["b"], "top_n": 0}, "top_n"),
                            ({"model": "rank", "query": "a", "documents": ["b"], "x": 1}, "x")):
            err = self.post("/v1/rerank", body, 400)
            self.assertEqual(err["error"]["param"], param, body)
        long = " ".join(["cat"] * 70)
        err = self.post("/v1/rerank", {"model": "rank", "query": "a", "documents": [long]}, 400)
        self.assertEqual(err["error"]["code"], "context_length_exceeded")
        self.assertIn("maximum context length is 64 tokens", err["error"]["message"])
        for bad in (0, -2, "3", 1.5):
            err = self.post("/v1/rerank", {"model": "rank", "query": "a", "documents": ["b"],
                                           "truncate_prompt_tokens": bad}, 400)
            self.assertEqual(err["error"]["param"], "truncate_prompt_tokens")
        # truncate_prompt_tokens keeps an input's last tokens: the embedding of the last 10 ids.
        ids = [int(t) for t in np.random.default_rng(9).integers(5, 300, size=70)]
        out = self.post("/v1/embeddings", {"model": "embed", "input": [ids], "pooling": "cls",
                                           "normalize": False, "truncate_prompt_tokens": 10})
        np.testing.assert_allclose(out["data"][0]["embedding"], self.refs["embed"].hidden(ids[-10:])[0],
                                   rtol=0, atol=2e-4)
        out = self.post("/v1/embeddings", {"model": "embed", "input": [ids], "truncate_prompt_tokens": -1})
        self.assertEqual(out["usage"]["prompt_tokens"], 64)
        out = self.post("/v1/rerank", {"model": "rank", "query": "a", "documents": [long],
                                       "truncate": True})
        self.assertEqual(len(out["results"]), 1)
        # Nothing was left running, and the requests were counted, by task.
        st, stats, _, _ = self.c.get("/v1/admin/stats")
        self.assertEqual(st, 200)
        self.assertGreater(stats["models"]["rank"]["requests_finished"], 0)
        self.post("/v1/embeddings", {"model": "embed", "input": "the cat"})
        self.post("/classify", {"model": "sentiment", "input": "the cat"})
        _, _, text, _ = self.c.get("/metrics")
        for model, task in (("rank", "score"), ("embed", "embed"), ("sentiment", "classify")):
            lines = [l for l in text.splitlines() if l.startswith("tokenflow_requests_total{")
                     and 'model="%s"' % model in l and 'task="%s"' % task in l and 'code="200"' in l]
            self.assertTrue(lines, (model, task))
            self.assertGreater(float(lines[0].rsplit(" ", 1)[1]), 0)


if __name__ == "__main__":
    unittest.main()
