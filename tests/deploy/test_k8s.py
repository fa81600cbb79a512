"""deploy/k8s (issue 25, item 2): every kustomize overlay renders (`kubectl kustomize`), and what
can be checked without a cluster is checked against tokenflow itself: each container's args
pass `tokenflow serve --check` (paths pointed at a temporary tree), the probes' paths answer 200
on a running server and name declared ports, the ports match the flags, the grace period covers
preStop + the drain, the autoscaler's metric is one the server exports, selectors select the
pods they mean (and a canary's do not select the stable track's), the HTTPRoute's backends are
Services of the render with weights summing to 100, and the InferenceService names the
ServingRuntime and a format it supports.

Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "serving"))
from test_server import BIN, STORIES_BIN, start_server, stop_server  # noqa: E402

K8S = os.path.join(REPO, "deploy", "k8s")
OVERLAYS = ["base", "overlays/canary", "overlays/kserve"]
KUBECTL = shutil.which("kubectl")


def render(overlay):
    p = subprocess.run([KUBECTL, "kustomize", os.path.join(K8S, overlay)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def flag(args, name):
    for a in args:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    if name in args:
        return args[args.index(name) + 1]
    return None


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


@unittest.skipUnless(KUBECTL, "kubectl is not installed: the manifests cannot be rendered")
class KubernetesManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = {o: render(o) for o in OVERLAYS}
        cls.proc, cls.port = start_server("--threads", "1")
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % cls.port, timeout=30) as r:
            cls.metrics = r.read().decode()

    @classmethod
    def tearDownClass(cls):
        code, err = stop_server(cls.proc)
        assert code == 0, err[-3000:]

    def get(self, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path),
                                        timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def of_kind(self, overlay, kind):
        return [d for d in self.docs[overlay] if d["kind"] == kind]

    def containers(self, overlay):
        """(kind, pod spec or runtime spec, container) for every container of the overlay."""
        out = []
        for d in self.docs[overlay]:
            if d["kind"] == "Deployment":
                spec = d["spec"]["template"]["spec"]
                out += [(d, spec, c) for c in spec["containers"]]
            elif d["kind"] == "ServingRuntime":
                out += [(d, d["spec"], c) for c in d["spec"]["containers"]]
        return out

    def test_every_overlay_renders_the_expected_kinds(self):
        kinds = {o: sorted({d["kind"] for d in docs}) for o, docs in self.docs.items()}
        for k in ("ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PersistentVolumeClaim",
                  "PodDisruptionBudget", "Service", "ServiceMonitor"):
            self.assertIn(k, kinds["base"])
        self.assertIn("HTTPRoute", kinds["overlays/canary"])
        self.assertEqual(kinds["overlays/kserve"], ["InferenceService", "ServingRuntime"])

    def test_container_args_pass_serve_check(self):
        for overlay in OVERLAYS:
            configmaps = {d["metadata"]["name"]: d for d in self.of_kind(overlay, "ConfigMap")}
            for owner, spec, c in self.containers(overlay):
                with tempfile.TemporaryDirectory() as tmp:
                    mounts = {}
                    for vm in c.get("volumeMounts", []):
                        vol = next(v for v in spec["volumes"] if v["name"] == vm["name"])
                        local = os.path.join(tmp, vm["name"])
                        os.makedirs(local)
                        if "configMap" in vol:
                            for fname, text in configmaps[vol["configMap"]["name"]]["data"].items():
                                with open(os.path.join(local, fname), "w") as f:
                                    f.write(text.replace("/models", os.path.join(tmp, "models")))
                        mounts[vm["mountPath"]] = local
                    args = []
                    for a in c["args"]:
                        a = a.replace("{{.Name}}", "llama").replace("/mnt/models", STORIES_BIN)
                        head, eq, value = a.rpartition("=") if a.startswith("--") else ("", "", a)
                        for path, local in mounts.items():  # a mount's path, whole components
                            if value == path or value.startswith(path + "/"):
                                value = local + value[len(path):]
                                break
                        args.append(head + eq + value)
                    p = subprocess.run([BIN, *args, "--check"], capture_output=True, text=True,
                                       timeout=60)
                    self.assertEqual(p.returncode, 0, "%s %s: %s" % (
                        overlay, owner["metadata"]["name"], p.stderr))
                    self.assertIn("ok: 1 model (llama)", p.stdout)

    def test_probes_ports_and_grace(self):
        for overlay in OVERLAYS:
            for owner, spec, c in self.containers(overlay):
                where = "%s %s" % (overlay, owner["metadata"]["name"])
                ports = {p.get("name"): p["containerPort"] for p in c["ports"]}
                self.assertEqual(int(flag(c["args"], "--port")), ports.get("http", 8080), where)
                if flag(c["args"], "--grpc-port"):
                    self.assertEqual(int(flag(c["args"], "--grpc-port")), ports["grpc"], where)
                probes = [c[k] for k in ("startupProbe", "readinessProbe", "livenessProbe")
                          if k in c]
                self.assertGreaterEqual(len(probes), 2, where)
                for probe in probes:
                    get = probe["httpGet"]
                    port = get["port"]
                    self.assertIn(port, list(ports) + list(ports.values()), where)
                    self.assertEqual(self.get(get["path"]), 200, "%s: %s" % (where, get["path"]))
                self.assertEqual(c.get("livenessProbe", {}).get("httpGet", {}).get("path"),
                                 "/healthz", where)
                if owner["kind"] == "Deployment":
                    self.assertIn("startupProbe", c, where)
                    start = c["startupProbe"]
                    self.assertGreaterEqual(start["periodSeconds"] * start["failureThreshold"],
                                            300, where)  # room for a model load
                    drain = float(flag(c["args"], "--shutdown-timeout"))
                    pre = c["lifecycle"]["preStop"]["sleep"]["seconds"]
                    self.assertGreater(spec["terminationGracePeriodSeconds"], drain + pre, where)

    def test_autoscaler_metric_is_exported_and_targets_the_deployment(self):
        for overlay in ("base", "overlays/canary"):
            deployments = {d["metadata"]["name"] for d in self.of_kind(overlay, "Deployment")}
            for hpa in self.of_kind(overlay, "HorizontalPodAutoscaler"):
                self.assertIn(hpa["spec"]["scaleTargetRef"]["name"], deployments)
                for m in hpa["spec"]["metrics"]:
                    name = m["pods"]["metric"]["name"]
                    self.assertRegex(self.metrics, r"(?m)^# TYPE %s gauge$" % re.escape(name))

    def test_selectors_select_their_own_pods_only(self):
        for overlay in ("base", "overlays/canary"):
            pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
                    for d in self.of_kind(overlay, "Deployment")}
            for d in self.of_kind(overlay, "Deployment"):
                self.assertTrue(selects(d["spec"]["selector"]["matchLabels"],
                                        pods[d["metadata"]["name"]]))
            for kind, path in (("Service", ("spec", "selector")),
                               ("PodDisruptionBudget", ("spec", "selector", "matchLabels"))):
                for d in self.of_kind(overlay, kind):
                    sel = d
                    for k in path:
                        sel = sel[k]
                    hits = [n for n, labels in pods.items() if selects(sel, labels)]
                    self.assertEqual(len(hits), 1, "%s %s selects %s" % (
                        kind, d["metadata"]["name"], hits))
                    self.assertEqual(hits[0], d["metadata"]["name"])
            services = {d["metadata"]["name"]: d for d in self.of_kind(overlay, "Service")}
            for sm in self.of_kind(overlay, "ServiceMonitor"):
                sel = sm["spec"]["selector"]["matchLabels"]
                targets = [s for s in services.values()
                           if selects(sel, s["metadata"].get("labels", {}))]
                self.assertEqual(len(targets), 1, sm["metadata"]["name"])
                names = [p["name"] for p in targets[0]["spec"]["ports"]]
                for ep in sm["spec"]["endpoints"]:
                    self.assertIn(ep["port"], names)
                    self.assertEqual(self.get(ep["path"]), 200)

    def test_canary_route_splits_between_the_tracks(self):
        services = {d["metadata"]["name"]: d for d in self.of_kind("overlays/canary", "Service")}
        (route,) = self.of_kind("overlays/canary", "HTTPRoute")
        for rule in route["spec"]["rules"]:
            refs = rule["backendRefs"]
            self.assertEqual(sum(r["weight"] for r in refs), 100)
            for r in refs:
                self.assertIn(r["name"], services)
                self.assertIn(r["port"], [p["port"] for p in services[r["name"]]["spec"]["ports"]])
        images = sorted(c["image"] for _, _, c in self.containers("overlays/canary"))
        self.assertEqual(images, ["tokenflow:v1", "tokenflow:v2"])

    def test_inference_service_names_the_runtime(self):
        (runtime,) = self.of_kind("overlays/kserve", "ServingRuntime")
        (isvc,) = self.of_kind("overlays/kserve", "InferenceService")
        pred = isvc["spec"]["predictor"]
        self.assertEqual(pred["model"]["runtime"], runtime["metadata"]["name"])
        self.assertIn(pred["model"]["modelFormat"]["name"],
                      [f["name"] for f in runtime["spec"]["supportedModelFormats"]])
        self.assertTrue(0 <= pred["canaryTrafficPercent"] <= 100)


if __name__ == "__main__":
    unittest.main()
