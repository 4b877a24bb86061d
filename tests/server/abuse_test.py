#!/usr/bin/env python3
"""The server-under-abuse campaign (ctest server_abuse, via run_abuse_test.sh; docs/RELIABILITY.md).

  abuse_test.py BASE_URL SERVER_PID CAP_URL
      BASE_URL: a server started with --max-queue 4 --header-timeout 4 --max-body-mib 1
                --read-timeout 2 --retry-after 3; CAP_URL: one with --max-connections 8

Each case has hard time limits (socket timeouts, and a watchdog that fails the whole run after
WATCHDOG_S), prints its numbers, and leaves the server healthy for the next one:
  slow headers    200 connections sending their head one byte per second: other clients are
                  still served while they are held, each gets 408 at the header timeout
  body limit      Content-Length over the limit: 413 before any body byte is sent; a chunked body
                  that passes the limit: 413 after about the limit, not after the whole body
  deep JSON       arrays, objects, tool parameters and tool-call arguments nested 10,000 (and
                  100,000) deep: 400, no crash
  invalid UTF-8   raw bad bytes, lone surrogates, overlong forms in content and prompt: 400
  queue           50 concurrent clients against a queue of 4: 429 with Retry-After for the rest,
                  every accepted request (streamed or not) completes
  disconnects     clients that leave mid-stream, during prefill and while queued: the job is
                  cancelled, the engine goes idle, the next request is served
  connections     pipelined keep-alive requests answered in order, an idle keep-alive connection
                  closed at the header timeout, the 9th connection to a server capped at 8 gets 503
  soak            200 mixed requests: RSS after them <= RSS after the first 20 + 10%, no file
                  descriptors left behind
"""
import json
import os
import socket
import sys
import threading
import time

import serve_client  # beside this file

BASE, PID = sys.argv[1].rstrip("/"), int(sys.argv[2])
HOST, PORT = BASE.split("//")[1].split("/")[0].split(":")
PORT = int(PORT)
CAP_PORT = int(sys.argv[3].split("//")[1].split("/")[0].split(":")[1])
CAP = 8
HEADER_TIMEOUT_S = 4
BODY_LIMIT = 1 << 20
QUEUE = 4
RETRY_AFTER = "3"
WATCHDOG_S = 170
CHAT = [{"role": "user", "content": "Hello! What is the capital of France?"}]


def watchdog():
    time.sleep(WATCHDOG_S)
    print(f"FAIL - the campaign ran past {WATCHDOG_S} s (a hang)", flush=True)
    os._exit(1)


threading.Thread(target=watchdog, daemon=True).start()


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def request(method, path, body=None, headers=None, timeout=30):
    return serve_client.request(BASE, method, path, body, headers, timeout)


def metric(name):
    return serve_client.metric(BASE, name)


def rss_kib():
    return serve_client.rss_kib(PID)


def open_fds():
    return len(os.listdir(f"/proc/{PID}/fd"))


def wait_idle(limit_s=10):
    t0 = time.monotonic()
    while metric("deltafin_requests_running") != 0 or metric("deltafin_queue_length") != 0:
        check(time.monotonic() - t0 < limit_s, "the engine did not go idle")
        time.sleep(0.05)


def read_response(s, limit_s=10):
    """Reads one response with a Content-Length body; returns (status, headers dict, body)."""
    s.settimeout(limit_s)
    buf = b""
    while b"\r\n\r\n" not in buf:
        more = s.recv(65536)
        check(more, f"connection closed before a response head ({buf!r})")
        buf += more
    head, body = buf.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        more = s.recv(65536)
        check(more, "connection closed inside a response body")
        body += more
    return int(lines[0].split()[1]), headers, body[:length]


def api_error(body):
    err = json.loads(body)["error"]
    check(err["message"] and err["type"], f"not an OpenAI error body: {body!r}")
    return err


def chat(max_tokens=4, stream=False, timeout=60):
    return request("POST", "/v1/chat/completions",
                   {"messages": CHAT, "max_tokens": max_tokens, "stream": stream}, timeout=timeout)


def test_slow_headers():
    n = 200
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nUser-Agent: one-byte-per-second\r\n"  # no end
    fds_before = open_fds()
    socks, opened = [], []
    for _ in range(n):
        socks.append(socket.create_connection((HOST, PORT), timeout=10))
        opened.append(time.monotonic())
    t_open = time.monotonic() - opened[0]
    time.sleep(0.2)  # let the accept loop catch up
    held = [open_fds() - fds_before]  # the server's sockets, measured before any timeout
    # One byte per second on every connection, for the header timeout plus 3 s; meanwhile other
    # clients must be served promptly.
    results = [None] * n  # (seconds from open to the server's answer or close, first bytes)
    probes, chats, failures, sent = [], [], [], 0
    t0 = time.monotonic()
    held_until = t0 + HEADER_TIMEOUT_S - 0.5  # every slow connection is still held until then

    def probe(kind):  # other clients, served while the slow connections are held
        while time.monotonic() < held_until:
            p0 = time.monotonic()
            if kind == "chat":
                status, _, out = chat(max_tokens=2)
            else:
                status, _, out = request("GET", "/health", timeout=5)
            if time.monotonic() < held_until:
                (chats if kind == "chat" else probes).append(time.monotonic() - p0)
            if status != 200:
                failures.append((kind, status, out[:200]))
            if kind != "chat":
                time.sleep(0.1)

    probers = [threading.Thread(target=probe, args=(k,)) for k in ("health", "chat")]
    for t in probers:
        t.start()
    while time.monotonic() - t0 < HEADER_TIMEOUT_S + 3:
        for i, s in enumerate(socks):
            if results[i] is not None:
                continue
            try:
                s.send(head[sent % len(head):sent % len(head) + 1])
            except OSError:
                pass  # the server closed it; the read below records when
        sent += 1
        tick = time.monotonic()
        while time.monotonic() - tick < 1.0:
            for i, s in enumerate(socks):
                if results[i] is not None:
                    continue
                s.setblocking(False)
                try:
                    got = s.recv(4096)
                    results[i] = (time.monotonic() - opened[i], got)
                except BlockingIOError:
                    pass
                except OSError as e:
                    results[i] = (time.monotonic() - opened[i], repr(e).encode())
            time.sleep(0.05)
    for s in socks:
        s.close()
    for t in probers:
        t.join(timeout=30)
    check(not failures, f"requests failed while the slow connections were held: {failures}")
    check(len(probes) >= 10 and chats, f"only {len(probes)} probes and {len(chats)} chats")
    check(all(r is not None for r in results),
          f"{sum(r is None for r in results)} slow connections still open after "
          f"{HEADER_TIMEOUT_S + 3} s")
    answered = [t for t, got in results if got.startswith(b"HTTP/1.1 408")]
    check(len(answered) == n, f"only {len(answered)} of {n} slow connections got 408: "
          f"{[got[:40] for _, got in results if not got.startswith(b'HTTP/1.1 408')][:3]}")
    check(min(answered) >= HEADER_TIMEOUT_S - 0.1, f"a 408 after {min(answered):.2f} s")
    check(max(answered) < HEADER_TIMEOUT_S + 1.5, f"a 408 after {max(answered):.2f} s")
    check(max(probes) < 0.5, f"/health took {max(probes):.2f} s with {n} slow connections")
    check(held[0] >= n, f"the server held {held[0]} connections at most, not {n}")
    print(f"ok - slow headers: {n} connections held (opened in {t_open:.2f} s; the server's open "
          f"fds +{held[0]}), each sending a byte per second; meanwhile {len(probes)} /health "
          f"probes (max {max(probes) * 1000:.0f} ms) and {len(chats)} chats (max "
          f"{max(chats):.2f} s) served; all {n} got 408 after "
          f"{min(answered):.2f}-{max(answered):.2f} s (header timeout {HEADER_TIMEOUT_S} s)")


def test_body_limit():
    # Content-Length over the limit: the answer comes before any of the body is sent.
    s = socket.create_connection((HOST, PORT), timeout=10)
    t0 = time.monotonic()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 10737418240\r\n\r\n")
    status, headers, body = read_response(s)
    took = time.monotonic() - t0
    check(status == 413 and api_error(body)["code"] == "request_too_large", f"{status} {body!r}")
    check(headers.get("connection") == "close", f"413 without Connection: close: {headers}")
    check(took < 1.0, f"the 413 took {took:.2f} s")
    s.settimeout(HEADER_TIMEOUT_S)
    check(s.recv(1) == b"", "the connection stays open after a refused body")
    s.close()
    # The same with Expect: 100-continue (curl's way for large bodies): 413, no 100 Continue.
    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
              b"Content-Length: 2000000\r\n\r\n")
    status, _, body = read_response(s)
    check(status == 413, f"with Expect: 100-continue: {status} {body!r}")
    s.close()
    # A chunked body that passes the limit: refused once about the limit has arrived.
    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"a" * (128 << 10)
    sent, refused = 0, None
    s.settimeout(0.05)
    while sent < 16 * BODY_LIMIT and refused is None:
        try:
            s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            sent += len(piece)
        except OSError:
            break
        try:
            refused = s.recv(65536)
        except socket.timeout:
            pass
    if refused is None:
        s.settimeout(5)
        refused = s.recv(65536)
    check(refused.startswith(b"HTTP/1.1 413"), f"chunked body over the limit: {refused[:80]!r}")
    check(sent <= 2 * BODY_LIMIT, f"the server read {sent} bytes before refusing")
    s.close()
    # Just under the limit is accepted (and parsed: this one is bad JSON, so 400).
    status, _, body = request("POST", "/v1/completions", b"{" + b" " * (BODY_LIMIT - 2) + b"x")
    check(status == 400 and api_error(body)["code"] == "invalid_json", f"{status} {body[:200]!r}")
    status, _, _ = request("GET", "/health")
    check(status == 200, "server must keep serving")
    print(f"ok - body limit: 413 for a declared 10 GiB body after {took * 1000:.0f} ms with no "
          f"body sent; 413 with Expect: 100-continue; a chunked body refused after "
          f"{sent // 1024} KiB (limit {BODY_LIMIT // 1024} KiB); a body just under the limit "
          f"parsed")


def test_deep_json():
    cases = []
    for depth in [10_000, 100_000]:
        tool = (b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", '
                b'"function": {"name": "f", "parameters": ' + b'{"a":' * depth + b"1" +
                b"}" * depth + b"}}]}")
        args = json.dumps('{"a":' * depth + "1" + "}" * depth).encode()
        call = (b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", '
                b'"content": null, "tool_calls": [{"id": "c", "type": "function", "function": '
                b'{"name": "f", "arguments": ' + args + b'}}]}, {"role": "tool", '
                b'"tool_call_id": "c", "content": "1"}]}')
        cases += [
            ("/v1/chat/completions", tool),
            ("/v1/chat/completions", call),
            ("/v1/chat/completions", b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"),
            ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": ' +
             b'{"a":' * depth + b"1" + b"}" * depth + b"}]}"),
            ("/v1/completions", b'{"prompt": ' + b"[" * depth + b"1" + b"]" * depth + b"}"),
            ("/v1/chat/completions", b"[" * depth),  # unterminated
        ]
    seen = set()
    for path, body in cases:
        t0 = time.monotonic()
        status, _, out = request("POST", path, body, timeout=30)
        took = time.monotonic() - t0
        check(status == 400, f"nested {len(body)} bytes to {path}: {status} {out[:200]!r}")
        seen.add(api_error(out)["code"])
        check(took < 5, f"a deeply nested body took {took:.2f} s")
    status, _, _ = request("GET", "/health")
    check(status == 200, "server must keep serving")
    print(f"ok - deep JSON: {len(cases)} bodies nested 10,000 and 100,000 deep (arrays, objects, "
          f"tool parameters, tool-call arguments, unterminated) -> 400 ({', '.join(sorted(seen))})")


def test_invalid_utf8():
    bad = [b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"abc\xe2\x82", b"\x80", b"\xf8\x88\x80\x80\x80"]
    escaped = [b"\\ud800", b"\\udc00x", b"\\ud800\\u0041"]
    n = 0
    for raw in bad + escaped:
        for path, body in [
                ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi ' + raw +
                 b'"}], "max_tokens": 2}'),
                ("/v1/completions", b'{"prompt": "x' + raw + b'", "max_tokens": 2}'),
                ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], '
                 b'"stop": ["' + raw + b'"], "max_tokens": 2}'),
                ("/v1/chat/completions", b'{"model": "' + raw + b'", "messages": []}')]:
            status, _, out = request("POST", path, body)
            check(status == 400, f"{body!r}: {status} {out[:200]!r}")
            api_error(out)
            n += 1
    # Invalid UTF-8 in the head (path and a header value) is answered, not fatal.
    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(b"GET /v1/models/\xff\xfe HTTP/1.1\r\nHost: x\r\nX-Bad: \xc0\xaf\r\n"
              b"Connection: close\r\n\r\n")
    status, _, out = read_response(s)
    check(status == 404, f"bad UTF-8 in the path: {status} {out!r}")
    json.loads(out)  # the error body is valid JSON (the bad bytes replaced)
    s.close()
    status, _, _ = chat(max_tokens=2)
    check(status == 200, "server must keep serving")
    print(f"ok - invalid UTF-8: {n} bodies with bad bytes, overlong forms, lone surrogates, "
          f"truncated sequences -> 400; bad bytes in the path -> 404 with a valid JSON body")


def test_queue_of_4():
    n = 50
    barrier = threading.Barrier(n)
    results = [None] * n

    def client(i):
        stream = i % 2 == 1
        body = json.dumps({"prompt": [72, 101, 108, 108, 111, 32 + i], "max_tokens": 12,
                           "stream": stream}).encode()
        barrier.wait(timeout=30)
        status, headers, out = request("POST", "/v1/completions", body, timeout=90)
        results[i] = (stream, status, headers, out)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=100)
    took = time.monotonic() - t0
    check(all(r is not None for r in results), "a client did not finish")
    ok = [r for r in results if r[1] == 200]
    busy = [r for r in results if r[1] == 429]
    check(len(ok) + len(busy) == n, f"unexpected statuses {sorted(r[1] for r in results)}")
    check(len(ok) >= QUEUE + 1, f"only {len(ok)} accepted with a queue of {QUEUE}")
    check(len(busy) >= n // 2, f"only {len(busy)} 429s for {n} concurrent clients")
    for _, _, headers, out in busy:
        check(headers.get("Retry-After") == RETRY_AFTER, f"429 Retry-After {headers}")
        check(api_error(out)["type"] == "rate_limit_exceeded", out)
    for stream, _, _, out in ok:
        if stream:
            events = out.decode().split("\n\n")
            check(events[-2] == "data: [DONE]" and events[-1] == "", f"stream ended {out[-80:]!r}")
            finish = [json.loads(e[6:])["choices"][0]["finish_reason"] for e in events
                      if e.startswith("data: {")]
            check(finish[-1] in ("length", "stop"), f"accepted stream ended with {finish[-1]}")
        else:
            r = json.loads(out)
            check(r["usage"]["completion_tokens"] > 0 and
                  r["choices"][0]["finish_reason"] in ("length", "stop"), out)
    wait_idle()
    print(f"ok - queue: {n} concurrent clients, queue {QUEUE}: {len(ok)} accepted and completed "
          f"({sum(r[0] for r in ok)} streamed), {len(busy)} got 429 with Retry-After "
          f"{RETRY_AFTER}, in {took:.1f} s")


def start_stream(body, path="/v1/chat/completions"):
    payload = json.dumps(body).encode()
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    return s


def read_until(s, marker, limit_s=20):
    s.settimeout(limit_s)
    buf = b""
    while marker not in buf:
        more = s.recv(65536)
        check(more, f"closed before {marker!r}")
        buf += more
    return buf


def wait_cancelled(before, limit_s=5):
    t0 = time.monotonic()
    while metric("deltafin_requests_cancelled_total") < before + 1:
        check(time.monotonic() - t0 < limit_s, "the job of a departed client was not cancelled")
        time.sleep(0.05)
    return time.monotonic() - t0


def test_disconnects():
    times = []
    # Mid-stream: after the first token.
    before = metric("deltafin_requests_cancelled_total")
    s = start_stream({"messages": CHAT, "max_tokens": 3000, "stream": True})
    read_until(s, b"data: {")
    s.close()
    times.append(wait_cancelled(before))
    wait_idle()
    # During prefill (a ~660-token prompt), before any token.
    before = metric("deltafin_requests_cancelled_total")
    s = start_stream({"prompt": "The quick brown fox jumps over the lazy dog. " * 30,
                      "max_tokens": 3000, "stream": True}, "/v1/completions")
    read_until(s, b"\r\n\r\n")
    time.sleep(0.3)
    s.close()
    times.append(wait_cancelled(before))
    wait_idle()
    # While queued behind another request.
    runner = start_stream({"messages": CHAT, "max_tokens": 3000, "stream": True})
    read_until(runner, b"data: {")
    before = metric("deltafin_requests_cancelled_total")
    s = start_stream({"messages": CHAT, "max_tokens": 5, "stream": True})
    read_until(s, b"\r\n\r\n")
    check(metric("deltafin_queue_length") == 1, "the second request is not queued")
    s.close()
    times.append(wait_cancelled(before))
    check(metric("deltafin_queue_length") == 0, "a departed client's job stayed queued")
    before = metric("deltafin_requests_cancelled_total")
    runner.close()
    times.append(wait_cancelled(before))
    wait_idle()
    status, _, out = chat(max_tokens=4)
    check(status == 200 and json.loads(out)["usage"]["completion_tokens"] > 0, out)
    print(f"ok - disconnects: mid-stream, during prefill, while queued and while running: each "
          f"job cancelled (after {', '.join(f'{t * 1000:.0f}' for t in times)} ms), the engine "
          f"idle, the next request served")


def test_connections():
    # Two requests in one write on one connection: both answered, in order, on that connection
    # (the server reads only what a request asks for; the rest waits in the socket).
    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    both = read_until(s, b'"object":"list"', limit_s=10)
    first, second = both.split(b"HTTP/1.1 ")[1:]
    check(first.startswith(b"200") and first.endswith(b'{"status":"ok"}'), f"{both!r}")
    check(second.startswith(b"200") and f"timeout={HEADER_TIMEOUT_S}".encode() in second,
          f"{both!r}")
    # The connection is kept alive; idle, it is closed (without a response) after the Keep-Alive
    # header's timeout (the header timeout).
    t0 = time.monotonic()
    s.settimeout(HEADER_TIMEOUT_S + 3)
    rest = s.recv(4096)
    idle = time.monotonic() - t0
    check(rest == b"", f"an idle keep-alive connection got {rest[:80]!r}")
    check(HEADER_TIMEOUT_S - 0.2 <= idle < HEADER_TIMEOUT_S + 1.5, f"closed after {idle:.2f} s")
    s.close()
    # The connection cap: CAP idle connections are held; the next one gets 503 at once.
    idle_socks = [socket.create_connection((HOST, CAP_PORT), timeout=10) for _ in range(CAP)]
    time.sleep(0.3)
    extra = socket.create_connection((HOST, CAP_PORT), timeout=10)
    status, headers, body = read_response(extra)
    check(status == 503 and api_error(body)["code"] == "too_many_connections" and
          headers.get("retry-after") == "1", f"over the cap: {status} {headers} {body!r}")
    extra.close()
    for x in idle_socks:
        x.close()
    time.sleep(0.3)
    s = socket.create_connection((HOST, CAP_PORT), timeout=10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    status, _, _ = read_response(s)
    check(status == 200, f"after the cap cleared: {status}")
    s.close()
    print(f"ok - connections: 2 pipelined requests answered in order on one connection; the idle "
          f"keep-alive connection closed after {idle:.2f} s; with --max-connections {CAP}, the "
          f"{CAP + 1}th connection got 503 (Retry-After 1) and a request after they closed was "
          f"served")


def soak_one(i):
    # Mostly short completions (a chat's template alone is ~240 tokens of prefill); a chat, a
    # sampled chat with stop sequences and a streamed chat every 100.
    kind = i % 10
    if i % 100 == 0:
        status, _, out = chat(max_tokens=4)
        check(status == 200, out)
    elif i % 100 == 50:
        status, _, out = chat(max_tokens=3, stream=True)
        check(status == 200 and out.endswith(b"data: [DONE]\n\n"), out[-100:])
    elif i % 100 == 9:
        msgs = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": f"Question {i}: " + "why? " * (i % 40)}]
        status, _, out = request("POST", "/v1/chat/completions",
                                 {"messages": msgs, "max_tokens": 3, "stop": ["x"],
                                  "temperature": 0.7, "seed": i})
        check(status == 200, out)
    elif kind in (0, 5, 9):
        status, _, out = request("POST", "/v1/completions",
                                 {"prompt": f"Soak {i}: " + "more " * (i % 30), "max_tokens": 4,
                                  "temperature": 0.5 * (i % 3), "seed": i, "stop": ["zz"]})
        check(status == 200 and json.loads(out)["choices"][0]["text"] is not None, out)
    elif kind == 1:
        status, _, out = request("POST", "/v1/completions",
                                 {"prompt": f"Soak request {i}", "max_tokens": 4, "stream": True})
        check(status == 200 and out.endswith(b"data: [DONE]\n\n"), out[-100:])
    elif kind == 2:
        for path in ["/health", "/v1/models", "/metrics"]:
            status, _, _ = request("GET", path)
            check(status == 200, path)
    elif kind == 3:
        status, _, _ = request("POST", "/v1/chat/completions", b'{"messages": [' * 2000)
        check(status == 400, "bad JSON")
    elif kind == 4:
        status, _, _ = request("GET", f"/v1/nothing/{i}")
        check(status == 404, "404")
    elif kind == 6:
        s = socket.create_connection((HOST, PORT), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n")
        status, _, _ = read_response(s)
        check(status == 413, "413")
        s.close()
    elif kind == 7:
        before = metric("deltafin_requests_cancelled_total")
        s = start_stream({"prompt": f"Leave {i}", "max_tokens": 3000, "stream": True},
                         "/v1/completions")
        read_until(s, b"data: {")
        s.close()
        wait_cancelled(before)
        wait_idle()
    elif kind == 8:
        status, _, _ = request("POST", "/v1/completions", b'{"prompt": "\xff\xfe"}')
        check(status == 400, "bad UTF-8")
    else:
        raise AssertionError(f"no soak kind {kind}")


def test_soak():
    n, first = 200, 20
    fds0 = open_fds()
    t0 = time.monotonic()
    spent = {}

    def timed(i):
        t = time.monotonic()
        soak_one(i)
        spent[i % 10] = spent.get(i % 10, 0) + time.monotonic() - t

    for i in range(first):
        timed(i)
    wait_idle()
    rss_first = rss_kib()
    for i in range(first, n):
        timed(i)
    wait_idle()
    rss_end = rss_kib()
    time.sleep(0.5)  # closed connections leave the gate
    fds_end = open_fds()
    took = time.monotonic() - t0
    check(rss_end <= rss_first * 1.10,
          f"RSS grew from {rss_first} KiB after {first} requests to {rss_end} KiB after {n}")
    check(fds_end <= fds0 + 2, f"file descriptors {fds0} -> {fds_end}: connections leaked")
    print(f"ok - soak: {n} mixed requests (completions plain, sampled and streamed, chats, GETs, "
          f"bad JSON, 404, 413, disconnects, bad UTF-8) in {took:.1f} s; RSS {rss_first} KiB after {first} -> "
          f"{rss_end} KiB after {n} ({(rss_end / rss_first - 1) * 100:+.1f}%, limit +10%); "
          f"open fds {fds0} -> {fds_end}; seconds by kind (i % 10): "
          f"{', '.join(f'{k}: {v:.1f}' for k, v in sorted(spent.items()))}")


t_all = time.monotonic()
for case in [test_slow_headers, test_body_limit, test_deep_json, test_invalid_utf8,
             test_queue_of_4, test_disconnects, test_connections, test_soak]:
    t_case = time.monotonic()
    case()
    print(f"     ({case.__name__}: {time.monotonic() - t_case:.1f} s)")
status, _, _ = request("GET", "/health")
check(status == 200, "server died")
print(f"all passed in {time.monotonic() - t_all:.1f} s")
