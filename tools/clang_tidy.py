#!/usr/bin/env python3
"""Runs clang-tidy over every src/**/*.cc in parallel, skipping files whose result is cached.

Used by tools/clang_tidy.sh (docs/RELIABILITY.md "Static checks"). A file is checked with the
release build's compile_commands.json and the checked-in .clang-tidy; any warning fails.

The cache: a clean result is remembered under a key that is the SHA-256 of everything that
decides clang-tidy's output for that file: the clang-tidy version, .clang-tidy, the file's compile
command, and the file preprocessed with that command keeping comments (-E -C), so every header it
includes and every NOLINT comment are part of the key. A changed file, header, flag, check or tool
version gives a new key and a fresh check. Only clean results are cached (a warning is always
re-reported). DF_TIDY_CACHE picks the folder (default ~/.cache/deltafin/clang-tidy); an empty
DF_TIDY_CACHE disables it.

  clang_tidy.py BUILD_DIR JOBS
"""

import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time


def preprocess_command(entry):
    """The entry's compile command turned into `-E -C` to stdout."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    return out + ["-E", "-C", "-o", "-"]


def cache_key(entry, tidy_version, config, root):
    """The key of one file's check; the checkout's path is replaced by a placeholder, so another
    clone of the same sources has the same keys."""
    here = root.encode()
    h = hashlib.sha256()
    h.update(tidy_version)
    h.update(config)
    h.update(entry.get("command", " ".join(entry.get("arguments", []))).encode().replace(here, b"@"))
    pre = subprocess.run(preprocess_command(entry), cwd=entry["directory"], capture_output=True,
                         check=False)
    if pre.returncode != 0:
        return None  # let clang-tidy report whatever is wrong
    h.update(pre.stdout.replace(here, b"@"))
    return h.hexdigest()


def main():
    build, jobs = sys.argv[1], int(sys.argv[2])
    tidy = os.environ.get("CLANG_TIDY", "/usr/bin/clang-tidy")
    root = os.path.realpath(os.getcwd())
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        entries = {os.path.realpath(e["file"]): e for e in json.load(f)}
    files = subprocess.run(["git", "ls-files", "--", "src/*.cc"], capture_output=True, text=True,
                           check=True).stdout.split()
    cache = os.environ.get("DF_TIDY_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache/deltafin/clang-tidy"))
    tidy_version = subprocess.run([tidy, "--version"], capture_output=True, check=True).stdout
    with open(os.path.join(root, ".clang-tidy"), "rb") as f:
        config = f.read()
    if cache:
        os.makedirs(cache, exist_ok=True)

    def check(path):
        entry = entries.get(os.path.realpath(path))
        key = cache_key(entry, tidy_version, config, root) if (cache and entry) else None
        if key and os.path.exists(os.path.join(cache, key)):
            return path, 0, "", True
        res = subprocess.run([tidy, "-p", build, "--quiet", "--warnings-as-errors=*", path],
                             capture_output=True, text=True, check=False)
        if res.returncode == 0 and key:
            with open(os.path.join(cache, key), "w", encoding="utf-8") as f:
                f.write(path + "\n")
        return path, res.returncode, res.stdout + res.stderr, False

    start = time.time()
    failed, cached = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, rc, output, hit in pool.map(check, files):
            cached += hit
            if rc != 0:
                failed.append(path)
                sys.stdout.write(output)
    verdict = "clean" if not failed else f"FAILED ({len(failed)} files: {' '.join(failed)})"
    print(f"clang-tidy: {len(files)} files ({cached} unchanged since a clean check, cached), "
          f"{jobs} jobs, {time.time() - start:.0f} s, {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
