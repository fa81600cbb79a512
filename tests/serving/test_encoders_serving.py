"""Encoders served (issue 52): /v1/embeddings, /v1/rerank (and /rerank, /v2/rerank), /score and
/classify on BERT-family models, against the numpy encoder (tests/reference/np_model.Bert).

One server with three random-weight models from make_checkpoints: an embedding model (BERT,
sentence-transformers' mean pooling and Normalize), a reranker (a cross-encoder with one label)
and a 3-label classifier, each with a WordPiece vocab.txt. Every score and vector is numpy's;
requests of many inputs come back in order; what a model cannot do is a 400 naming it."""

import json
import os
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
from test_encoders import write_bert_vocab  # noqa: E402


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
        flags = []
        for name, d in cls.dirs.items():
            flags += ["--model", "%s=%s" % (name, d)]
        cls.proc, port = start_server("--threads", "1", model=flags)
        cls.c = Client(port)

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

    def test_what_a_model_cannot_do_is_a_400_naming_it(self):
        err = self.post("/v1/rerank", {"model": "embed", "query": "a", "documents": ["b"]}, 400)
        self.assertIn("has no classifier head", err["error"]["message"])
        err = self.post("/v1/completions", {"model": "embed", "prompt": "the cat", "max_tokens": 2}, 400)
        self.assertIn("is an encoder", err["error"]["message"])
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
