"""Checks of constrained JSON output and the prefix cache against a running `deltafin serve`
(driven by run_json_cache_test.sh). Usage: json_cache_test.py MODE BASE_URL [STATE_FILE]."""
import http.client
import json
import random
import sys
import time
import urllib.parse

import serve_client  # beside this file

MODE, BASE = sys.argv[1], sys.argv[2]
STATE = sys.argv[3] if len(sys.argv) > 3 else None


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def chat(body, timeout=300):
    status, _, raw = serve_client.request(BASE, "POST", "/v1/chat/completions", body,
                                          timeout=timeout)
    return status, json.loads(raw)


# An independent validator of the schema subset (not the server's automaton).
def valid(schema, v):
    if "const" in schema:
        return v == schema["const"] and type(v) is type(schema["const"])
    if "enum" in schema:
        return any(v == e and type(v) is type(e) for e in schema["enum"])
    t = schema.get("type")
    if t is None:
        return True
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "string":
        return (isinstance(v, str) and len(v) >= schema.get("minLength", 0)
                and len(v) <= schema.get("maxLength", len(v)))
    if t == "array":
        return (isinstance(v, list) and schema.get("minItems", 0) <= len(v)
                <= schema.get("maxItems", len(v))
                and all(valid(schema.get("items", {}), x) for x in v))
    if t == "object":
        if not isinstance(v, dict):
            return False
        props = schema.get("properties", {})
        if any(r not in v for r in schema.get("required", [])):
            return False
        for k, x in v.items():
            if k in props:
                if not valid(props[k], x):
                    return False
            elif schema.get("additionalProperties", True) is False:
                return False
        return True
    return False


SCHEMA = {
    "type": "object",
    "properties": {
        "mood": {"enum": ["ok", "sad", 3]},
        "n": {"type": "integer"},
        "ok": {"type": "boolean"},
        "s": {"type": "string", "maxLength": 4},
        "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
        "x": {"type": "null"},
    },
    "required": ["mood", "n", "ok", "s"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Describe the weather as JSON."}]


def test_json():
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "strict": True, "schema": SCHEMA}}
    for seed in range(50):
        status, r = chat({"messages": MESSAGES, "response_format": fmt, "temperature": 1,
                          "seed": seed, "max_tokens": 400})
        check(status == 200, f"json_schema seed {seed}: {status} {r}")
        choice = r["choices"][0]
        text = choice["message"]["content"]
        check(choice["finish_reason"] == "stop", f"seed {seed}: {choice['finish_reason']}: {text!r}")
        try:
            v = json.loads(text)
        except ValueError as e:
            sys.exit(f"FAIL: seed {seed}: not JSON ({e}): {text!r}")
        check(valid(SCHEMA, v), f"seed {seed}: does not validate: {text!r}")
    print("ok - 50 of 50 seeded json_schema answers (temperature 1) parse and validate")
    stopped = 0
    for seed in range(5):
        status, r = chat({"messages": MESSAGES, "response_format": {"type": "json_object"},
                          "temperature": 1, "seed": 100 + seed, "max_tokens": 300})
        check(status == 200, f"json_object seed {seed}: {status} {r}")
        choice = r["choices"][0]
        text = choice["message"]["content"]
        if choice["finish_reason"] == "length":
            continue  # free JSON may nest and run on: cut by max_tokens, nothing to check
        stopped += 1
        v = json.loads(text)
        check(isinstance(v, dict), f"json_object seed {seed}: not an object: {text!r}")
    check(stopped >= 1, "no json_object answer ended within 300 tokens")
    print(f"ok - json_object: {stopped} of 5 answers ended, each a JSON object")
    # Streaming gives the same constrained text.
    status, r = chat({"messages": MESSAGES, "response_format": fmt, "temperature": 1,
                      "seed": 3, "max_tokens": 1000})
    u = urllib.parse.urlparse(BASE)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.request("POST", "/v1/chat/completions",
                 json.dumps({"messages": MESSAGES, "response_format": fmt, "temperature": 1,
                             "seed": 3, "max_tokens": 1000, "stream": True}),
                 {"Content-Type": "application/json"})
    streamed = ""
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:])["choices"]:
                streamed += c["delta"].get("content") or ""
    check(streamed == r["choices"][0]["message"]["content"], "streamed JSON differs")
    print("ok - a streamed json_schema answer equals the non-streamed one")
    # Unsupported and invalid schemas: 400 naming the keyword.
    for schema, word in [({"type": "string", "pattern": "^a"}, "pattern"),
                         ({"type": "object", "properties": {"a": {"anyOf": []}}}, "anyOf"),
                         ({"type": "integer", "minimum": 1}, "minimum")]:
        status, r = chat({"messages": MESSAGES, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        check(status == 400, f"{word}: {status}")
        check(f"'{word}'" in r["error"]["message"], r["error"]["message"])
        check(r["error"]["param"] == "response_format.json_schema.schema", r["error"]["param"])
    print("ok - unsupported schema keywords are a 400 naming them")


def system_prompt():
    rng = random.Random(5)
    words = ["river", "stone", "lamp", "quiet", "north", "paper", "seven", "orbit", "glass"]
    return "You are a careful assistant. " + " ".join(rng.choice(words) for _ in range(800))


def timed_chat(user):
    """Streams one answer; returns (seconds to the first token's chunk, usage)."""
    body = {"messages": [{"role": "system", "content": system_prompt()},
                         {"role": "user", "content": user}],
            "max_tokens": 2, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    u = urllib.parse.urlparse(BASE)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    check(resp.status == 200, f"status {resp.status}")
    ttft, usage = None, None
    while True:
        line = resp.fp.readline()
        if not line:
            break
        line = line.decode().strip()
        if not line.startswith("data: {"):
            continue
        chunk = json.loads(line[6:])
        if ttft is None and chunk.get("choices"):
            ttft = time.monotonic() - t0
        if chunk.get("usage"):
            usage = chunk["usage"]
    conn.close()
    return ttft, usage


def cached(usage):
    return usage["prompt_tokens_details"]["cached_tokens"]


def test_cache_first():
    t1, u1 = timed_chat("hello")
    check(u1["prompt_tokens"] >= 2000, f"the prompt is only {u1['prompt_tokens']} tokens")
    check(cached(u1) == 0, f"first request reports {cached(u1)} cached")
    t2, u2 = timed_chat("something else entirely")  # the same system prompt, another question
    check(cached(u2) >= 1900, f"second request: {cached(u2)} cached tokens")
    # 59 of 2,434 tokens computed; the rest of the TTFT is fixed per-request work, which took
    # 8.7% of the cold TTFT on a loaded CI machine: 30% still rules out a recomputed prefix.
    check(t2 <= 0.3 * t1, f"second request's TTFT {t2:.3f}s > 30% of {t1:.3f}s")
    print(f"ok - second request: {cached(u2)}/{u2['prompt_tokens']} cached, "
          f"TTFT {t2 * 1e3:.0f} ms vs {t1 * 1e3:.0f} ms")
    with open(STATE, "w") as f:
        json.dump({"ttft": t1}, f)


def test_cache_restart():
    t1 = json.load(open(STATE))["ttft"]
    t, u = timed_chat("a third question after the restart")
    check(cached(u) >= 1900, f"after a restart: {cached(u)} cached tokens")
    # The cached-token count is the proof of reuse; the time only has to rule out a recomputed
    # prefix. A fresh process reads the cache file and warms its pages first, and on a loaded
    # 2-core CI machine that took 10% of the cold TTFT once (0.30 s of 3.0 s): half is the bound.
    check(t <= 0.5 * t1, f"after a restart: TTFT {t:.3f}s > 50% of {t1:.3f}s")
    print(f"ok - first request after a restart: {cached(u)}/{u['prompt_tokens']} cached, "
          f"TTFT {t * 1e3:.0f} ms vs {t1 * 1e3:.0f} ms")


def test_cache_corrupt():
    t, u = timed_chat("hello")
    check(cached(u) == 0, f"a corrupt cache served {cached(u)} tokens")
    print(f"ok - with corrupt files the prompt is prefilled again ({u['prompt_tokens']} tokens)")


def test_cache_ram():
    # serve --cache-bytes 0: the cache lives in RAM only. It serves the shared prefix within one
    # run (the caller checks that no cache folder was made and that a restart starts cold).
    _, u1 = timed_chat("hello")
    check(cached(u1) == 0, f"first request reports {cached(u1)} cached")
    _, u2 = timed_chat("something else entirely")
    check(cached(u2) >= 1900, f"RAM-only cache, second request: {cached(u2)} cached tokens")
    print(f"ok - --cache-bytes 0: the second request reused {cached(u2)} tokens from RAM")


def test_smoke():
    status, r = chat({"messages": MESSAGES, "max_tokens": 2})
    check(status == 200, f"status {status}")


{"json": test_json, "cache-first": test_cache_first, "cache-restart": test_cache_restart,
 "cache-corrupt": test_cache_corrupt, "cache-ram": test_cache_ram, "smoke": test_smoke}[MODE]()
