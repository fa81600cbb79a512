#!/usr/bin/env python3
"""The layer map of DESIGN.md (docs/architecture.md), checked on the includes of src/.

Each layer includes only itself and the layers below it; chat and engine stand side by side
(neither includes the other). Inside serving: core/ and models/ include no protocol folder and
no transport (http/, grpc/); a protocol folder (openai/, tfserving/, anthropic/, ollama/)
includes no other protocol; only the composition root (serving/model_server.*) includes them
all. No two files include each other, directly or through others. Prints every violation and
exits 1 when there is one.

Usage: check_layers.py [SRC_DIR]   (default: the src/ beside this file's tests/)
"""
import os
import re
import sys

# Bottom to top; a layer may include the layers before it in this list, except the pairs in
# SIDE_BY_SIDE.
LAYERS = ["core", "kernels", "model", "tokenizer", "sampling", "chat", "engine", "serving", "cli"]
SIDE_BY_SIDE = {("chat", "engine"), ("engine", "chat")}
PROTOCOLS = {"openai", "tfserving", "anthropic", "ollama"}
TRANSPORTS = {"http", "grpc"}
NEUTRAL = {"core", "models"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def serving_room(path):
    """serving/<room>/x.h -> room; serving/x.h -> '' (the composition root)."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else ""


def check(src):
    files = {}
    for root, _, names in os.walk(src):
        for n in names:
            if n.endswith((".h", ".cc", ".inc")):
                p = os.path.join(root, n)
                rel = os.path.relpath(p, src)
                with open(p, encoding="utf-8", errors="replace") as f:
                    files[rel] = INCLUDE.findall(f.read())
    problems = []
    for rel, incs in sorted(files.items()):
        layer = rel.split("/")[0]
        if layer not in LAYERS:
            problems.append(f"{rel}: not in a layer folder ({', '.join(LAYERS)})")
            continue
        for inc in incs:
            target = inc.split("/")[0]
            if inc not in files:
                continue  # generated or third-party (protobuf, gRPC), or a same-folder .inc
            if target != layer:
                if LAYERS.index(target) > LAYERS.index(layer) or (layer, target) in SIDE_BY_SIDE:
                    problems.append(f"{rel}: includes {inc} ({target} is not below {layer})")
                continue
            if layer != "serving":
                continue
            a, b = serving_room(rel), serving_room(inc)
            if a == b or a == "":
                continue
            if a in NEUTRAL and (b in PROTOCOLS or b in TRANSPORTS or b == ""):
                problems.append(f"{rel}: includes {inc} (serving/{a} is protocol-neutral)")
            elif a in PROTOCOLS and (b in PROTOCOLS or b == ""):
                problems.append(f"{rel}: includes {inc} (a protocol includes no other)")
            elif a in TRANSPORTS and (b in PROTOCOLS or b == ""):
                problems.append(f"{rel}: includes {inc} (a transport knows no protocol)")
    # Include cycles between files.
    graph = {rel: [i for i in incs if i in files] for rel, incs in files.items()}
    state = {}
    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for m in graph[n]:
            if state.get(m) == 1:
                problems.append("include cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            elif m not in state:
                visit(m, stack)
        stack.pop()
        state[n] = 2
    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    return problems, len(files)


def self_test():
    """Positive controls: a tree with one violation of each rule is refused on each."""
    import tempfile
    tree = {
        "core/a.h": "",
        "kernels/k.h": '#include "core/a.h"\n#include "model/m.h"\n',  # upward
        "model/m.h": '#include "kernels/k.h"\n',  # (cycle with kernels/k.h)
        "chat/c.h": '#include "engine/e.h"\n',  # side by side
        "engine/e.h": "",
        "serving/core/s.h": '#include "serving/openai/o.h"\n',  # neutral -> protocol
        "serving/models/r.h": '#include "serving/http/h.h"\n',  # neutral -> transport
        "serving/http/h.h": '#include "serving/tfserving/t.h"\n',  # transport -> protocol
        "serving/openai/o.h": '#include "serving/tfserving/t.h"\n',  # protocol -> protocol
        "serving/tfserving/t.h": '#include "serving/core/s.h"\n',
        "serving/model_server.h": '#include "serving/openai/o.h"\n',  # allowed
        "stray/x.h": "",
    }
    expect = ["kernels/k.h: includes model/m.h", "chat/c.h: includes engine/e.h",
              "serving/core/s.h: includes serving/openai/o.h",
              "serving/models/r.h: includes serving/http/h.h",
              "serving/http/h.h: includes serving/tfserving/t.h",
              "serving/openai/o.h: includes serving/tfserving/t.h", "include cycle:",
              "stray/x.h: not in a layer folder"]
    with tempfile.TemporaryDirectory() as d:
        for rel, text in tree.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        problems, _ = check(d)
    missed = [e for e in expect if not any(p.startswith(e) for p in problems)]
    extra = [p for p in problems if not any(p.startswith(e) for e in expect)]
    if missed or extra or any("model_server" in p for p in problems):
        print("self-test failed: missed", missed, "unexpected", extra)
        return 1
    print(f"self-test: {len(problems)} planted violations found")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    problems, n = check(src)
    for p in problems:
        print(p)
    print(f"{n} files, {len(problems)} violation(s) of the layer map")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
