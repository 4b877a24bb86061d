#!/usr/bin/env python3
"""Runs the README's code blocks against the tiny models, so every command it shows works as written.

Every fenced block in README.md is preceded by a marker comment that says what this test does
with it (a block without one fails the test, so a new block cannot slip in unchecked):

  <!-- readme-test: run DIR=golden -->   run the block with bash; `deltafin` is the built binary,
                                         each NAME=model substitutes the word NAME by a fresh copy
                                         of that model (golden: tests/data/golden/tiny-k3, demo:
                                         models/k3-kjv-demo); the block's cwd is a temp folder
  <!-- readme-test: serve DIR=golden --> as run, but a line starting `deltafin serve` starts the
                                         server in the background on a free port (the block's
                                         8000 becomes that port) and the rest runs once it is
                                         healthy; the server is stopped afterwards
  <!-- readme-test: output -->           an example output: the first line is `$ CMD  # = REAL`;
                                         REAL is run and its stdout must equal the block's other
                                         lines
  <!-- readme-test: skip REASON -->      not run here, and why (needs 19 GB, a hub, root, ...)

It also checks that the "What works today" table has a row for every subcommand that
`deltafin --help` lists.

  readme_test.py DELTAFIN_BINARY SOURCE_DIR
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

MODELS = {"golden": "tests/data/golden/tiny-k3", "demo": "models/k3-kjv-demo"}
MARKER = re.compile(r"<!--\s*readme-test:\s*(\w+)\s*(.*?)\s*-->")


def blocks(readme):
    """Yields (line number, marker kind, marker args, fence language, block lines)."""
    lines = readme.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            lang = lines[i][3:].strip()
            start = i
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body = lines[i + 1:j]
            marker = None
            for k in (start - 1, start - 2):
                if k >= 0:
                    m = MARKER.search(lines[k])
                    if m:
                        marker = m
                        break
            yield (start + 1, marker.group(1) if marker else None,
                   marker.group(2) if marker else "", lang, body)
            i = j + 1
        else:
            i += 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def substitute(text, args, tmp, source):
    for arg in args.split():
        name, _, model = arg.partition("=")
        if model not in MODELS:
            raise ValueError(f"unknown model '{model}' in marker (known: {', '.join(MODELS)})")
        dest = os.path.join(tmp, f"model-{name.lower()}")
        if not os.path.exists(dest):
            shutil.copytree(os.path.join(source, MODELS[model]), dest)
        text = re.sub(rf"(?<![\w/.-]){re.escape(name)}(?![\w/-])", dest, text)
    return text


def run_block(binary, source, kind, args, body, line):
    tmp = tempfile.mkdtemp(prefix="readme-test-")
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    os.symlink(os.path.abspath(binary), os.path.join(bindir, "deltafin"))
    for name in ("tools", "models"):  # blocks name repository paths as from its root
        os.symlink(os.path.join(os.path.abspath(source), name), os.path.join(tmp, name))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"])
    server = None
    try:
        script = substitute("\n".join(body), args, tmp, source)
        if kind == "serve":
            port = str(free_port())
            script = script.replace("8000", port)
            lines = script.splitlines()
            serve = [ln for ln in lines if ln.lstrip().startswith("deltafin serve")]
            if len(serve) != 1:
                return f"line {line}: a serve block needs exactly one `deltafin serve` line"
            rest = "\n".join(ln for ln in lines if ln not in serve)
            cmd = serve[0].split("#")[0].strip() + f" --port {port}"
            server = subprocess.Popen(["bash", "-c", "exec " + cmd], cwd=tmp, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.time() + 60
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                    break
                except OSError:
                    if server.poll() is not None or time.time() > deadline:
                        err = server.stderr.read().decode(errors="replace")[-2000:]
                        return f"line {line}: the server did not come up: {err}"
                    time.sleep(0.2)
            script = rest
        res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp, env=env,
                             capture_output=True, timeout=600)
        if res.returncode != 0:
            return (f"line {line}: exit {res.returncode}\n--- script\n{script}\n--- stderr\n"
                    + res.stderr.decode(errors="replace")[-3000:])
        return None
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def check_output(binary, source, body, line):
    if not body or not body[0].startswith("$ ") or "# = " not in body[0]:
        return f"line {line}: an output block starts with `$ CMD  # = REAL COMMAND`"
    real = body[0].split("# = ", 1)[1].strip()
    env = dict(os.environ)
    bindir = tempfile.mkdtemp(prefix="readme-bin-")
    os.symlink(os.path.abspath(binary), os.path.join(bindir, "deltafin"))
    env["PATH"] = bindir + os.pathsep + env["PATH"]
    try:
        res = subprocess.run(["bash", "-c", real], cwd=source, env=env, capture_output=True,
                             timeout=600)
    finally:
        shutil.rmtree(bindir, ignore_errors=True)
    if res.returncode != 0:
        return f"line {line}: `{real}` exited {res.returncode}: {res.stderr.decode()[-2000:]}"
    got = res.stdout.decode().rstrip("\n").splitlines()
    want = body[1:]
    if [g.rstrip() for g in got] != [w.rstrip() for w in want]:
        return f"line {line}: `{real}` printed\n{chr(10).join(got)}\nbut the README shows\n" + \
            "\n".join(want)
    return None


def subcommands(binary, *path):
    """The subcommand names `deltafin PATH... --help` lists."""
    res = subprocess.run([binary, *path, "--help"], capture_output=True, text=True, check=True)
    names = []
    in_subs = False
    for ln in res.stdout.splitlines():
        if ln.strip().upper().startswith("SUBCOMMANDS"):
            in_subs = True
            continue
        if in_subs:
            m = re.match(r"\s+([a-z][a-z0-9-]*)\b", ln)
            if m:
                names.append(m.group(1))
            elif ln.strip() and not ln.startswith(" "):
                in_subs = False
    return names


def check_subcommands(binary, readme):
    """Every command (`bench`'s own subcommands each) has a row in "What works today"."""
    commands = []
    for name in subcommands(binary):
        subs = subcommands(binary, name)
        commands += [f"{name} {sub}" for sub in subs] if subs else [name]
    if not commands:
        return ["`deltafin --help` lists no subcommands (cannot check the table)"]
    section = readme.split("## What works today", 1)
    if len(section) != 2:
        return ["README has no '## What works today' section"]
    table = section[1].split("\n## ", 1)[0]
    return [f"'What works today' has no row for `deltafin {c}`" for c in commands
            if not re.search(rf"^\|\s*`deltafin {re.escape(c)}\b", table, re.M)]


def main():
    binary, source = sys.argv[1], sys.argv[2]
    with open(os.path.join(source, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    failures = check_subcommands(binary, readme)
    counts = {}
    for line, kind, args, lang, body in blocks(readme):
        if kind is None:
            failures.append(f"line {line}: block has no <!-- readme-test: ... --> marker")
            continue
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "skip":
            if not args:
                failures.append(f"line {line}: a skip marker needs a reason")
            continue
        if kind in ("run", "serve"):
            err = run_block(binary, source, kind, args, body, line)
        elif kind == "output":
            err = check_output(binary, source, body, line)
        else:
            err = f"line {line}: unknown marker kind '{kind}'"
        print(f"README line {line}: {kind} {'ok' if err is None else 'FAILED'}", flush=True)
        if err:
            failures.append(err)
    for f in failures:
        print("FAIL:", f)
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    print(f"readme_test: {summary}; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
