"""The container image (issue 25, item 1): scripts/build-image writes a root file system from
this machine's Debian packages (the binary, the SentencePiece shim, exactly the libraries they
load) and, where podman is installed, imports it. The root file system is run for real: under
`unshare -r chroot` (a user namespace, no privileges needed) the server answers a completion on
127.0.0.1 and a SentencePiece tokenizer loads through the shim; with podman the image itself
runs. The Dockerfile's runtime packages must cover every library the binary links.

Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.abspath(os.environ.get("TOKENFLOW_BIN",
                                     os.path.join(REPO, "build", "release", "tokenflow")))
SHARED = os.environ.get("TF_SHARED_DIR", os.path.join(REPO, "..", "shared"))
STORIES = os.path.join(SHARED, "models", "stories260K")


def sanitized():
    """Whether BIN is a sanitizer build (the image and the Dockerfile are made from release)."""
    out = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    return any(n in out for n in ("libasan", "libtsan", "libubsan"))


def build_rootfs(path):
    p = subprocess.run([os.path.join(REPO, "scripts", "build-image"), "--binary", BIN,
                        "--rootfs", path, "--no-import"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return int(re.search(r"root file system: (\d+) bytes", p.stdout).group(1))


def jail(rootfs):
    """The command prefix that runs a program inside a root file system as a container would
    (its own /proc), or None and why."""
    # A user and mount namespace (no privileges needed), the host's /proc bound in, then chroot;
    # every step execs, so the server keeps the PID the test signals.
    ns = ["unshare", "-r", "-m", "sh", "-c",
          'mount --rbind /proc "$0/proc" && exec chroot "$0" "$@"', rootfs]
    if shutil.which("unshare") and subprocess.run(
            [*ns, "/usr/local/bin/tokenflow", "--help"], capture_output=True).returncode == 0:
        return ns, ""
    return None, ("user and mount namespaces (unshare -r -m) are not available here, so the "
                  "root file system cannot be entered without privileges")


class RootFsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tf_image_")
        cls.rootfs = os.path.join(cls.dir, "rootfs")
        cls.size = build_rootfs(cls.rootfs)
        for f in ("stories260K.bin", "tok512.bin"):
            shutil.copy(os.path.join(STORIES, f), os.path.join(cls.rootfs, "models"))
        os.makedirs(os.path.join(cls.rootfs, "models", "llama2"))
        shutil.copy(os.path.join(SHARED, "tokenizers", "llama2", "tokenizer.model"),
                    os.path.join(cls.rootfs, "models", "llama2"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_the_root_file_system_is_small_and_complete(self):
        # Measured: ~90 MB (the binary 14 MB; ICU's data, gRPC, HDF5 and OpenSSL most of the
        # rest). A library pulled in by mistake shows here. (A sanitizer build is ~4x larger.)
        if not sanitized():
            self.assertLess(self.size, 200 * 2**20, self.size)
        names = set(os.listdir(os.path.join(self.rootfs, "usr", "local", "bin")))
        self.assertEqual(names, {"tokenflow", "libtf_spm_shim.so"})
        for d in ("proc", "dev", "tmp", "models"):
            self.assertTrue(os.path.isdir(os.path.join(self.rootfs, d)), d)
        with open(os.path.join(self.rootfs, "etc", "passwd")) as f:
            self.assertIn("tokenflow:x:10001:10001:", f.read())
        for shell in ("bin/sh", "usr/bin/bash", "usr/bin/apt-get"):
            self.assertFalse(os.path.exists(os.path.join(self.rootfs, shell)), shell)

    def test_the_server_runs_inside_it(self):
        prefix, why = jail(self.rootfs)
        if not prefix:
            self.skipTest(why)
        proc = subprocess.Popen(
            [*prefix, "/usr/local/bin/tokenflow", "serve", "--model",
             "/models/stories260K.bin", "--port", "0", "--kv-cache-memory", "32MiB",
             "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            self.assertIsNotNone(m, line + proc.stderr.read() if not m else "")
            req = urllib.request.Request(
                "http://127.0.0.1:%s/v1/completions" % m.group(1),
                data=json.dumps({"prompt": "Once upon a time", "max_tokens": 8,
                                 "temperature": 0}).encode(),
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                body = json.loads(r.read())
            self.assertEqual(body["choices"][0]["finish_reason"], "length")
            self.assertTrue(body["choices"][0]["text"].strip())
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0)

    def test_sentencepiece_loads_through_the_shim(self):
        prefix, why = jail(self.rootfs)
        if not prefix:
            self.skipTest(why)
        p = subprocess.run([*prefix, "/usr/local/bin/tokenflow", "tokenize", "-m",
                            "/models/llama2", "Hello world"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("15043", p.stdout)  # "▁Hello" in Llama 2's vocabulary

    @unittest.skipUnless(shutil.which("podman"),
                         "podman is not installed: the root file system ran under unshare/chroot "
                         "instead (test_the_server_runs_inside_it)")
    def test_the_podman_image_runs(self):
        tag = "localhost/tokenflow-test:latest"
        p = subprocess.run([os.path.join(REPO, "scripts", "build-image"), "--binary", BIN,
                            "--tag", tag], capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        try:
            p = subprocess.run(["podman", "run", "--rm", "--network", "none", "-v",
                                "%s:/models:ro" % STORIES, tag, "generate", "-m",
                                "/models/stories260K.bin", "-p", "Once", "-n", "8", "-t", "0"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(p.stdout.strip())
        finally:
            subprocess.run(["podman", "rmi", "-f", tag], capture_output=True)


@unittest.skipUnless(shutil.which("dpkg") and shutil.which("readelf"), "needs dpkg and readelf")
class DockerfileTest(unittest.TestCase):
    def test_runtime_packages_cover_every_linked_library(self):
        if sanitized():
            self.skipTest("a sanitizer build links more than the release build the Dockerfile "
                          "makes; checked in the release run")
        with open(os.path.join(REPO, "Dockerfile")) as f:
            text = f.read()
        runtime = text[text.index("FROM debian:bookworm-slim"):]
        listed = set(re.findall(r"\b(lib[a-z0-9.+-]+)\b", runtime))
        objects = [BIN, os.path.join(os.path.dirname(BIN), "libtf_spm_shim.so")]
        ldd = subprocess.run(["ldd", *objects], capture_output=True, text=True).stdout
        paths = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
        needed = set()
        for obj in objects:
            out = subprocess.run(["readelf", "-d", obj], capture_output=True, text=True).stdout
            needed |= set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", out))
        for name in sorted(needed):
            if name.startswith(("libasan", "libubsan", "libtsan")) or name.startswith("libc.") \
                    or name.startswith(("libm.", "libgcc_s", "ld-linux")):
                continue  # sanitizer builds; the C runtime every Debian image has
            path = os.path.realpath(paths[name])
            owners = None
            for candidate in (path, path.replace("/usr/lib/", "/lib/", 1), paths[name]):
                p = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
                if p.returncode == 0:
                    owners = {line.split(":")[0] for line in p.stdout.splitlines()}
                    break
            self.assertIsNotNone(owners, "%s (%s): no Debian package owns it" % (name, path))
            self.assertTrue(owners & listed,
                            "%s comes from %s, which the Dockerfile's runtime stage does not "
                            "install" % (name, owners))


if __name__ == "__main__":
    unittest.main()
