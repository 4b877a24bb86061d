#!/usr/bin/env python3
"""Raw HTTP and load checks of `deltafin serve` (ctest server_http, via run_http_test.sh).

  http_test.py BASE_URL SERVER_PID SERVER_LOG CORS_URL
      BASE_URL: a server started with --max-queue 2 --ping-interval 0.1 --max-body-mib 1
      --read-timeout 1 --header-timeout 2 and no --cors-origin, logging to SERVER_LOG; CORS_URL: one started with
      --cors-origin http://allowed.example --api-key sekrit

SSE framing byte by byte over a raw socket, keep-alive comments during a long prefill, [DONE]
followed by the end of the body, the queue under concurrent load (200s and 429s, no crash, RSS
stable), other endpoints answering during generation, bad bodies, slow and stalled clients, a
non-streaming client that disconnects, conversation state reuse over a 3-turn chat, `timings`
in responses, CORS (none without --cors-origin; preflights and origins with it), the web chat
page's headers, and the request log (timestamp, level, status and timings on every line).
"""
import re
import json
import socket
import sys
import threading
import time

import serve_client  # beside this file

BASE, PID = sys.argv[1].rstrip("/"), int(sys.argv[2])
LOG, CORS_BASE = sys.argv[3], sys.argv[4].rstrip("/")
HOST, PORT = BASE.split("//")[1].split("/")[0].split(":")
PORT = int(PORT)
CHAT = [{"role": "user", "content": "Hello! What is the capital of France?"}]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def request(method, path, body=None, headers=None, timeout=60, base=None):
    return serve_client.request(base or BASE, method, path, body, headers, timeout)


def metric(name):
    return serve_client.metric(BASE, name)


def rss_kib():
    return serve_client.rss_kib(PID)


def raw_stream(body, path="/v1/chat/completions"):
    """Sends a POST on a raw socket; returns (head, [(time, chunk bytes)], t_headers, end_ok)."""
    payload = json.dumps(body).encode()
    s = socket.create_connection((HOST, PORT), timeout=60)
    t0 = time.monotonic()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    t_headers = time.monotonic() - t0
    head, buf = buf.split(b"\r\n\r\n", 1)
    chunks = []
    while True:  # chunked transfer encoding
        while b"\r\n" not in buf:
            more = s.recv(65536)
            check(more, "connection closed inside the chunked body")
            buf += more
        size_line, buf = buf.split(b"\r\n", 1)
        size = int(size_line, 16)
        while len(buf) < size + 2:
            more = s.recv(65536)
            check(more, "connection closed inside a chunk")
            buf += more
        if size == 0:
            while len(buf) < 2:
                buf += s.recv(65536)
            buf = buf[2:]  # the blank line that ends a chunked body (no trailers)
            break
        chunks.append((time.monotonic() - t0, buf[:size]))
        buf = buf[size + 2:]
    check(buf == b"", "bytes after the end of the body")
    s.close()
    return head.decode(), chunks, t_headers


def test_sse_framing():
    head, chunks, _ = raw_stream({"messages": CHAT, "max_tokens": 6, "stream": True,
                                  "stream_options": {"include_usage": True}})
    check(head.startswith("HTTP/1.1 200"), head)
    check("content-type: text/event-stream" in head.lower(), head)
    body = b"".join(c for _, c in chunks).decode()
    events = body.split("\n\n")
    check(events[-1] == "", "the body must end with a blank line")
    events = events[:-1]
    check(events[-1] == "data: [DONE]", f"last event {events[-1]!r}")
    datas = [e for e in events[:-1] if not e.startswith(":")]
    for e in datas:
        check(e.startswith("data: ") and "\n" not in e, f"bad event {e!r}")
        json.loads(e[6:])
    for e in events:
        check(e.startswith("data: ") or e == ": ping", f"unexpected event {e!r}")
    last = json.loads(datas[-1][6:])
    check(last["choices"] == [] and last["usage"]["completion_tokens"] == 6, datas[-1])
    print("ok - SSE framing, [DONE], end of body")


def test_pings_during_long_prefill():
    prompt = "The quick brown fox jumps over the lazy dog. " * 80  # ~1,760 tokens, ~1.5 s
    head, chunks, t_headers = raw_stream({"prompt": prompt, "max_tokens": 2, "stream": True},
                                         "/v1/completions")
    check(head.startswith("HTTP/1.1 200"), head)
    first_data = next(t for t, c in chunks if c.startswith(b"data: {"))
    pings_before = [t for t, c in chunks if c == b": ping\n\n" and t < first_data]
    check(first_data - t_headers > 0.5, f"prefill too short to test: {first_data - t_headers:.2f}s")
    check(len(pings_before) >= 3, f"only {len(pings_before)} pings during prefill")
    gaps = [b - a for a, b in zip([t_headers] + pings_before, pings_before + [first_data])]
    check(max(gaps) < 1.0, f"a silent gap of {max(gaps):.2f}s during prefill")
    print(f"ok - headers after {t_headers:.3f}s, {len(pings_before)} pings during a "
          f"{first_data - t_headers:.2f}s prefill")


def test_paths_and_bad_requests():
    for path in ["/v1/models/", "//v1//models", "/health/"]:
        status, _, _ = request("GET", path)
        check(status == 200, f"{path}: {status}")
    cases = [(b"{not json", 400, "invalid_json"), (b'{"messages": 5}', 400, "invalid_type"),
             (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}', 400, None),
             (b'[]', 400, None)]
    for body, want, code in cases:
        status, _, out = request("POST", "/v1/chat/completions", body)
        err = json.loads(out)["error"]
        check(status == want and err["message"] and (code is None or err["code"] == code),
              f"{body!r}: {status} {out!r}")
    huge = b'{"prompt": "' + b"a" * (2 << 20) + b'"}'
    status, _, out = request("POST", "/v1/completions", huge)
    check(status == 413 and json.loads(out)["error"]["code"] == "request_too_large",
          f"huge body: {status} {out[:200]!r}")
    status, _, out = request("GET", "/v1/nothing")
    check(status == 404 and "error" in json.loads(out), f"404: {status}")
    print("ok - trailing/double slashes, malformed JSON, wrong types, 413, 404")


def test_slow_and_stalled_clients():
    # A client that sends its request one byte at a time is served correctly...
    req = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    slow = socket.create_connection((HOST, PORT), timeout=30)
    # ...and a client that stalls mid-headers is dropped after --header-timeout (2 s).
    stalled = socket.create_connection((HOST, PORT), timeout=30)
    stalled.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    t0 = time.monotonic()
    for b in req:
        slow.send(bytes([b]))
        time.sleep(0.01)
        status, _, _ = request("GET", "/health") if b == ord("\n") else (200, 0, 0)
        check(status == 200, "server stopped answering during a slow client")
    reply = b""
    while chunk := slow.recv(4096):
        reply += chunk
    check(reply.startswith(b"HTTP/1.1 200") and b'"ok"' in reply, f"slow client got {reply!r}")
    stalled.settimeout(10)
    rest = stalled.recv(4096)
    waited = time.monotonic() - t0
    check(rest == b"" or b"400" in rest.split(b"\r\n")[0] or b"408" in rest.split(b"\r\n")[0],
          f"stalled client got {rest!r}")
    check(waited < 8, f"stalled client kept for {waited:.1f}s")
    status, _, _ = request("GET", "/health")
    check(status == 200, "server must keep serving")
    print(f"ok - slow client served; stalled client dropped after {waited:.1f}s")


def test_nonstreaming_disconnect_cancels():
    before = metric("deltafin_requests_cancelled_total")
    payload = json.dumps({"messages": CHAT, "max_tokens": 3000}).encode()
    s = socket.create_connection((HOST, PORT))
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
              f"{len(payload)}\r\n\r\n".encode() + payload)
    time.sleep(1.0)
    s.close()
    t0 = time.monotonic()
    while metric("deltafin_requests_cancelled_total") < before + 1:
        check(time.monotonic() - t0 < 3, "closed non-streaming request was not cancelled")
        time.sleep(0.05)
    while metric("deltafin_requests_running") != 0:
        check(time.monotonic() - t0 < 3, "engine still busy")
        time.sleep(0.05)
    print(f"ok - a non-streaming client that disconnects is cancelled "
          f"({time.monotonic() - t0:.2f}s after close)")


def load_round(n):
    results = []

    def one(i):
        body = {"prompt": [72, 101, 108, 108, 111, 32 + i % 50], "max_tokens": 40}
        status, headers, out = request("POST", "/v1/completions", body, timeout=120)
        results.append((status, headers, out))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    # Other endpoints answer while the engine is busy.
    times = []
    for path in ["/health", "/v1/models", "/metrics"] * 3:
        t0 = time.monotonic()
        status, _, _ = request("GET", path, timeout=5)
        times.append(time.monotonic() - t0)
        check(status == 200, f"{path} during load: {status}")
    busy = metric("deltafin_requests_running")
    for t in threads:
        t.join()
    return results, sorted(times)[len(times) // 2], busy


def test_bounded_load():
    load_round(12)  # warm up (allocator pools, thread stacks)
    rss0 = rss_kib()
    for rnd in range(3):
        results, median, busy_after = load_round(12)
        codes = [s for s, _, _ in results]
        ok, busy = codes.count(200), codes.count(429)
        check(ok + busy == 12, f"unexpected statuses {codes}")
        check(ok >= 3 and busy >= 1, f"round {rnd}: {ok} completions, {busy} 429s")
        for s, h, out in results:
            if s == 429:
                check(int(h.get("Retry-After", "0")) > 0, "429 without Retry-After")
                check(json.loads(out)["error"]["type"] == "rate_limit_exceeded", out)
            else:
                check(json.loads(out)["usage"]["completion_tokens"] > 0, out)
        # The probes ran while the engine was generating (a round takes ~0.5 s per request on
        # the tiny model); a blocked endpoint would wait for the whole round.
        check(busy_after == 1, "the probes did not overlap generation")
        check(median < 0.25, f"endpoints took {median:.2f}s (median) during generation")
    grow = rss_kib() - rss0
    check(grow < 8 * 1024, f"RSS grew by {grow} KiB over 36 requests")
    print(f"ok - 3 x 12 concurrent requests, queue 2: {ok} done/{busy} 429 in the last round; "
          f"RSS {rss0} KiB -> +{grow} KiB; other endpoints answered in {median:.3f}s (median)")


def chat_turn(messages, **extra):
    t0 = time.monotonic()
    status, _, out = request("POST", "/v1/chat/completions",
                             {"messages": messages, **extra})
    check(status == 200, out)
    r = json.loads(out)
    return r, time.monotonic() - t0


def test_conversation_reuse():
    """A growing chat continues from the saved state; an unrelated request resets it."""
    msgs = [{"role": "user", "content": "Hello! Tell me about Paris."}]
    prev_prompt = 0
    for turn in range(3):
        r, _ = chat_turn(msgs, max_tokens=1)
        cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(cached == prev_prompt, f"turn {turn}: cached {cached}, expected {prev_prompt}")
        prev_prompt = r["usage"]["prompt_tokens"]
        m = r["choices"][0]["message"]
        msgs += [{"role": "assistant", "content": m["content"],
                  "reasoning_content": m.get("reasoning_content", "")},
                 {"role": "user", "content": f"And what about turn {turn + 2}?"}]
    r, _ = chat_turn([{"role": "user", "content": "Something else."}], max_tokens=1)
    check(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "unrelated prompt reused")
    print("ok - conversation state reuse over 3 turns; an unrelated prompt starts fresh")


def test_timings():
    """llama-server's `timings` in whole responses and in the final chunk; per token on request."""
    status, _, out = request("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 5})
    t = json.loads(out)["timings"]
    usage = json.loads(out)["usage"]
    check(t["predicted_n"] == 5 and t["prompt_n"] + t["cache_n"] == usage["prompt_tokens"], t)
    check(t["prompt_ms"] > 0 and t["predicted_ms"] > 0 and t["predicted_per_second"] > 0, t)
    check(abs(t["predicted_per_token_ms"] * 4 - t["predicted_ms"]) < 1e-6 * t["predicted_ms"], t)
    for key in ["prompt_per_second", "prompt_per_token_ms", "io_wait_ms", "compute_ms",
                "expert_bytes_read"]:
        check(key in t, f"timings lacks {key}")
    _, chunks, _ = raw_stream({"messages": CHAT, "max_tokens": 6, "stream": True})
    datas = [json.loads(e[6:]) for e in b"".join(c for _, c in chunks).decode().split("\n\n")
             if e.startswith("data: {")]
    check("timings" in datas[-1] and datas[-1]["choices"][0]["finish_reason"], datas[-1])
    check(all("timings" not in d and "token_timings" not in d for d in datas[:-1]),
          "timings before the final chunk without timings_per_token")
    _, chunks, _ = raw_stream({"messages": CHAT, "max_tokens": 6, "stream": True,
                               "timings_per_token": True})
    datas = [json.loads(e[6:]) for e in b"".join(c for _, c in chunks).decode().split("\n\n")
             if e.startswith("data: {")]
    steps = [s for d in datas for s in d.get("token_timings", [])]
    check([s["index"] for s in steps] == list(range(6)), f"token_timings indices {steps}")
    check(steps[0]["phase"] == "prefill" and steps[0]["positions"] > 1, steps[0])
    check(all(s["phase"] == "decode" and s["positions"] == 1 for s in steps[1:]), steps)
    for s in steps:  # each step's forward passes: I/O wait + compute, within its wall time
        check(s["io_wait_ms"] >= 0 and s["compute_ms"] > 0, s)
        check(s["io_wait_ms"] + s["compute_ms"] <= s["ms"] * 1.001 + 0.01, s)
    total = sum(s["ms"] for s in steps[1:])
    final = datas[-1]["timings"]
    check(abs(final["predicted_ms"] - total) < 1e-6 * total + 1e-9, (final, total))
    check(all("timings" in d for d in datas), "timings_per_token: timings in every chunk")
    print(f"ok - timings: {t['predicted_per_second']:.1f} decode tok/s, prefill "
          f"{t['prompt_per_second']:.0f} tok/s; token_timings for 6 tokens sum to predicted_ms")


def test_no_cors_without_the_flag():
    origin = {"Origin": "http://elsewhere.example"}
    answers = [request("GET", "/v1/models", headers=origin),
               request("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 1},
                       headers=origin),
               request("OPTIONS", "/v1/chat/completions",
                       headers={**origin, "Access-Control-Request-Method": "POST",
                                "Access-Control-Request-Headers": "content-type"}),
               request("GET", "/", headers=origin)]
    for status, headers, _ in answers:
        cors = [h for h in headers if h.lower().startswith("access-control-")]
        check(cors == [], f"CORS headers without --cors-origin: {cors}")
    check(answers[2][0] == 404, f"preflight without --cors-origin: {answers[2][0]}")
    print("ok - no Access-Control-* headers without --cors-origin (GET, POST, preflight, page)")


def test_cors_with_the_flag():
    allowed, other = "http://allowed.example", "http://other.example"
    pre = {"Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type"}
    # A preflight carries no credentials, so it is answered before the API key check.
    status, h, _ = request("OPTIONS", "/v1/chat/completions", base=CORS_BASE,
                           headers={"Origin": allowed, **pre})
    check(status == 204, f"allowed preflight: {status}")
    check(h.get("Access-Control-Allow-Origin") == allowed and "POST" in
          h.get("Access-Control-Allow-Methods", "") and "authorization" in
          h.get("Access-Control-Allow-Headers", "").lower() and h.get("Vary") == "Origin", h)
    status, h, _ = request("OPTIONS", "/v1/chat/completions", base=CORS_BASE,
                           headers={"Origin": other, **pre})
    check(status == 403 and "Access-Control-Allow-Origin" not in h, f"other origin: {status} {h}")
    status, h, _ = request("OPTIONS", "/v1/chat/completions", base=CORS_BASE,
                           headers={"Origin": allowed, "Access-Control-Request-Method": "PUT"})
    check(status == 403, f"preflight for PUT: {status}")
    key = {"Authorization": "Bearer sekrit"}
    status, h, out = request("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 1},
                             base=CORS_BASE, headers={"Origin": allowed, **key})
    check(status == 200 and h.get("Access-Control-Allow-Origin") == allowed, f"{status} {h}")
    check("Retry-After" in h.get("Access-Control-Expose-Headers", ""), h)
    # Errors carry the header too, so that the page can read why (here: no key).
    status, h, _ = request("GET", "/v1/models", base=CORS_BASE, headers={"Origin": allowed})
    check(status == 401 and h.get("Access-Control-Allow-Origin") == allowed, f"{status} {h}")
    status, h, _ = request("GET", "/v1/models", base=CORS_BASE, headers={"Origin": other, **key})
    check(status == 200 and "Access-Control-Allow-Origin" not in h, f"other origin GET: {h}")
    status, h, _ = request("GET", "/v1/models", base=CORS_BASE, headers=key)
    check(status == 200 and "Access-Control-Allow-Origin" not in h, "no Origin, no CORS headers")
    print("ok - --cors-origin: preflight 204 before auth, 403 for other origins/methods; "
          "Allow-Origin only for the allowed origin, on errors too")


def test_chat_page():
    status, h, out = request("GET", "/")
    check(status == 200 and h["Content-Type"].startswith("text/html"), f"GET /: {status} {h}")
    csp = h.get("Content-Security-Policy", "")
    check("default-src 'none'" in csp and "connect-src 'self'" in csp, csp)
    page = out.decode()
    check("/v1/chat/completions" in page and "<script" in page, "not the chat page")
    check(not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "external reference")
    # The page is public (it holds nothing), the API behind it is not.
    status, _, _ = request("GET", "/", base=CORS_BASE)
    check(status == 200, f"page behind --api-key: {status}")
    print(f"ok - GET / serves the {len(out)}-byte chat page with a CSP that forbids other origins")


LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARN|ERROR) (.*)$")
REQUEST = re.compile(r"^127\.0\.0\.1:\d+ (GET|POST|OPTIONS) (\S+) (\d{3})(?: (\d+\.\d{3})s(?: (.*))?)?$")


def test_request_log():
    """Every log line has a timestamp and a level; every request one line with its status."""
    with open(LOG) as f:
        lines = f.read().splitlines()
    seen = {}
    for line in lines:
        m = LINE.match(line)
        check(m, f"log line without timestamp and level: {line!r}")
        r = REQUEST.match(m.group(2))
        if r:
            seen.setdefault((r.group(1), r.group(2).rstrip("/"), int(r.group(3))), []).append(r)
    for key in [("GET", "/health", 200), ("GET", "/metrics", 200), ("GET", "/v1/models", 200),
                ("POST", "/v1/chat/completions", 200), ("POST", "/v1/completions", 429),
                ("POST", "/v1/completions", 413), ("GET", "/v1/nothing", 404),
                ("POST", "/v1/chat/completions", 400), ("POST", "/v1/chat/completions", 499),
                ("GET", "", 200)]:
        check(key in seen, f"no log line for {key}")
    for r in seen[("POST", "/v1/chat/completions", 200)]:
        check(r.group(4) and re.match(r"chatcmpl-\w+ prompt=\d+ cached=\d+ completion=\d+ "
                                      r"ttft=[\d.-]+s prefill=\d+/[\d.]+s decode=\d+/[\d.]+s "
                                      r"io_wait=[\d.]+s$", r.group(5) or ""), r.group(0))
    check(any((r.group(5) or "").endswith(" cancelled")
              for r in seen[("POST", "/v1/chat/completions", 499)]), "499 not marked cancelled")
    check(all(r.group(4) for r in seen[("GET", "/health", 200)]), "request without a duration")
    print(f"ok - {len(lines)} log lines, all timestamped with a level; one per request with "
          f"status and duration ({sum(len(v) for v in seen.values())} requests)")


for t in [test_sse_framing, test_pings_during_long_prefill, test_paths_and_bad_requests,
          test_slow_and_stalled_clients, test_nonstreaming_disconnect_cancels, test_bounded_load,
          test_conversation_reuse, test_timings, test_no_cors_without_the_flag,
          test_cors_with_the_flag, test_chat_page]:
    t()
time.sleep(0.2)  # the last response's log line is written after its last byte
test_request_log()
status, _, _ = request("GET", "/health")
check(status == 200, "server died")
print("all passed")
