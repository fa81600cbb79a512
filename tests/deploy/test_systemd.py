"""deploy/systemd/tokenflow.service (issue 25, item 4): systemd itself checks the unit
(`systemd-analyze verify`), rates its sandbox (`systemd-analyze security --offline`: the overall
exposure must stay "OK", at most 2.0 of 10), and the unit's command line is one tokenflow
accepts (`serve --check`, with the unit's paths pointed at a temporary tree).

Env: TOKENFLOW_BIN.
"""

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
UNIT = os.path.join(REPO, "deploy", "systemd", "tokenflow.service")
BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(REPO, "build", "release", "tokenflow"))
ANALYZE = shutil.which("systemd-analyze")


def exec_start(text):
    """The unit's ExecStart command line, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    m = re.search(r"^ExecStart=(.*)$", joined, re.M)
    return shlex.split(m.group(1))


@unittest.skipUnless(ANALYZE, "systemd-analyze is not installed (Debian's systemd package)")
class SystemdUnitTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tf_systemd_")
        with open(UNIT) as f:
            self.text = f.read()
        # The unit as installed, with ExecStart naming this build's binary.
        self.unit = os.path.join(self.dir, "tokenflow.service")
        with open(self.unit, "w") as f:
            f.write(self.text.replace("/usr/local/bin/tokenflow", os.path.abspath(BIN)))

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_systemd_verifies_the_unit(self):
        p = subprocess.run([ANALYZE, "verify", self.unit], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        # Unknown or misplaced directives are warnings on stderr, not errors: none allowed.
        self.assertNotIn("tokenflow.service", p.stderr, p.stderr)

    def test_the_sandbox_rates_ok(self):
        p = subprocess.run([ANALYZE, "security", "--offline=true", self.unit],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        m = re.search(r"Overall exposure level for tokenflow\.service: ([0-9.]+)", p.stdout)
        self.assertIsNotNone(m, p.stdout[-2000:])
        self.assertLessEqual(float(m.group(1)), 2.0, p.stdout[-3000:])
        for directive in ("DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes",
                          "SystemCallFilter=@system-service", "KillSignal=SIGTERM"):
            self.assertIn(directive, self.text)

    def test_the_command_line_is_one_tokenflow_accepts(self):
        args = exec_start(self.text)
        self.assertEqual(args[:2], ["/usr/local/bin/tokenflow", "serve"])
        # The paths the unit names, inside a temporary tree.
        etc, models = os.path.join(self.dir, "etc"), os.path.join(self.dir, "models")
        os.makedirs(etc)
        os.makedirs(os.path.join(models, "stories"))
        with open(os.path.join(etc, "models.config"), "w") as f:
            f.write('model_config_list { config { name: "stories" base_path: "%s" '
                    'model_platform: "tensorflow" } }\n' % os.path.join(models, "stories"))
        args = [a.replace("/etc/tokenflow", etc).replace("/var/lib/tokenflow/models", models)
                for a in args[1:]]
        p = subprocess.run([BIN, *args, "--check"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("ok: 1 model (stories)", p.stdout)
        self.assertIn("HTTP 127.0.0.1:8000, gRPC 127.0.0.1:8500", p.stdout)
        # The drain window fits in systemd's stop timeout.
        shutdown = float(args[args.index("--shutdown-timeout") + 1])
        stop = float(re.search(r"^TimeoutStopSec=(\d+)", self.text, re.M).group(1))
        self.assertLess(shutdown, stop)
        # --check is no rubber stamp: a missing config file fails it.
        bad = [a.replace(os.path.join(etc, "models.config"), os.path.join(etc, "none.config"))
               for a in args]
        p = subprocess.run([BIN, *bad, "--check"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("none.config", p.stderr)


if __name__ == "__main__":
    unittest.main()
