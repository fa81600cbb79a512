#!/usr/bin/env python3
"""haproxy.cfg for tokenflow replicas, from their list alone (issue 50, item 7).

The replica list is the only input: one replica per line, `MODEL HOST:PORT [WEIGHT]` (weight
1-256, default 100; `#` starts a comment). The configuration

  - routes by the request body's "model" (OpenAI's completions, chat, Responses and embeddings,
    Anthropic's /v1/messages, Ollama's /api/chat, /api/generate, /api/embed and /api/show:
    "name", "name:version", "name@label" and Ollama's "name:tag" alike) and by TF Serving's
    /v1/models/NAME paths to one backend per model; requests that name no model (listings,
    /api/tags, /api/version, health) go to the first model's backend;
  - health-checks every replica on /readyz and retries a request whose replica failed before
    answering on another one (the body is buffered, so it can be sent again);
  - weighs replicas (a canary gets its share);
  - with --balance affinity (the default), sends requests that share a prompt prefix to the same
    replica (a consistent hash of the prompt's or first message's first bytes), where that prefix
    is already in the prefix cache.

    python3 deploy/haproxy/render.py replicas.txt --bind 0.0.0.0:8000 > haproxy.cfg
    haproxy -c -f haproxy.cfg

deploy/haproxy/fleet.py renders its local fleet's configuration with it.
"""

import argparse
import re
import sys

PREFIX_BYTES = 256  # the prompt bytes the affinity hash reads
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ADDRESS = re.compile(r"^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):([0-9]{1,5})$")


class Replica:
    def __init__(self, model, host, port, weight=100, name=None):
        self.model, self.host, self.port, self.weight = model, host, int(port), int(weight)
        self.name = name


def parse_replicas(text):
    """The replica list's lines as Replicas; ValueError naming the line otherwise."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) not in (2, 3):
            raise ValueError("line %d: expected MODEL HOST:PORT [WEIGHT], got %r" % (n, line))
        model, address = parts[0], parts[1]
        if not MODEL_NAME.match(model):
            raise ValueError("line %d: %r is not a model name (letters, digits, . _ -)" % (n, model))
        m = ADDRESS.match(address)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ValueError("line %d: %r is not HOST:PORT" % (n, address))
        weight = 100
        if len(parts) == 3:
            if not parts[2].isdigit() or not 1 <= int(parts[2]) <= 256:
                raise ValueError("line %d: weight %r is not in 1..256" % (n, parts[2]))
            weight = int(parts[2])
        out.append(Replica(model, m.group(1), m.group(2), weight))
    if not out:
        raise ValueError("the replica list names no replica")
    return out


def render(replicas, bind="127.0.0.1:8000", balance="affinity", stats_socket=None,
           maxconn=4096):
    """The configuration's text. replicas: Replicas (name: the server's name; default
    MODEL-N), in the order their models' backends are listed (the first is the default)."""
    models = []
    for r in replicas:
        if r.model not in models:
            models.append(r.model)
    lines = ["global", "  maxconn %d" % maxconn]
    if stats_socket:
        lines.append("  stats socket %s mode 600 level admin" % stats_socket)
    lines += [
        "defaults",
        "  mode http",
        "  timeout connect 2s",
        "  timeout client 300s",
        "  timeout server 300s",
        "  timeout http-request 30s",
        # The whole body is in haproxy before a server is chosen: routing reads it, and a
        # request whose server failed before answering can be sent again.
        "  option http-buffer-request",
        "  retries 3",
        "  option redispatch 1",
        # 503: a replica that is shutting down refuses new requests with it.
        "  retry-on conn-failure empty-response response-timeout 503",
        # A replica whose host name does not resolve yet starts down instead of stopping haproxy.
        "  default-server inter 300ms fall 2 rise 1 observe layer4 error-limit 1 "
        "on-error mark-down init-addr libc,none",
        "frontend front",
        "  bind %s" % bind,
        # Every door's body names its model in "model" (Ollama's /api/show, /api/pull and
        # /api/delete may say "name").
        "  http-request set-var(txn.model) req.body,json_query('$.model') if { method POST }",
        "  http-request set-var(txn.model) req.body,json_query('$.name') "
        "if { method POST } { path_beg /api/ } !{ var(txn.model) -m found }",
        # The affinity key: the prompt's first bytes (completions, Ollama's generate), else
        # the system prompt (Anthropic's), else the first message's (chat, messages).
        "  http-request set-var(txn.prefix) req.body,json_query('$.prompt'),"
        "bytes(0,%d) if { method POST }" % PREFIX_BYTES,
        "  http-request set-var(txn.prefix) req.body,json_query('$.system'),"
        "bytes(0,%d) if { method POST } !{ var(txn.prefix) -m found }" % PREFIX_BYTES,
        "  http-request set-var(txn.prefix) req.body,json_query('$.messages[0].content'),"
        "bytes(0,%d) if { method POST } !{ var(txn.prefix) -m found }" % PREFIX_BYTES,
    ]
    for name in models:
        # "name", "name:version", "name@label" and Ollama's "name:tag" all go to its backend.
        lines.append("  use_backend be_%s if { var(txn.model) -m reg ^%s([:@].*)?$ }"
                     % (name, re.escape(name)))
        lines.append("  use_backend be_%s if { path_reg ^/v1/models/%s([/:@].*)?$ }"
                     % (name, re.escape(name)))
    lines.append("  default_backend be_%s" % models[0])
    for name in models:
        lines.append("backend be_%s" % name)
        if balance == "affinity":
            lines += ["  balance hash var(txn.prefix)", "  hash-type consistent"]
        else:
            lines += ["  balance roundrobin"]
        lines += ["  option httpchk GET /readyz", "  http-check expect status 200"]
        reps = [r for r in replicas if r.model == name]
        for i, r in enumerate(reps):
            lines.append("  server %s %s:%d check weight %d"
                         % (r.name or "%s-%d" % (name, i), r.host, r.port, r.weight))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("replicas", help="the replica list (- for stdin)")
    ap.add_argument("--bind", default="0.0.0.0:8000", help="where haproxy listens")
    ap.add_argument("--balance", choices=["affinity", "roundrobin"], default="affinity")
    ap.add_argument("--stats-socket", help="haproxy's admin socket (drains, weights)")
    a = ap.parse_args()
    text = sys.stdin.read() if a.replicas == "-" else open(a.replicas).read()
    try:
        replicas = parse_replicas(text)
    except ValueError as e:
        print("render.py: %s: %s" % (a.replicas, e), file=sys.stderr)
        return 2
    sys.stdout.write(render(replicas, a.bind, a.balance, a.stats_socket))
    return 0


if __name__ == "__main__":
    sys.exit(main())
