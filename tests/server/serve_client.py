"""HTTP helpers shared by the raw-HTTP (http_test.py) and abuse (abuse_test.py) checks of
`deltafin serve`: one JSON request with its status, headers and body (errors included), one
Prometheus counter from /metrics, and a process's resident set size."""
import json
import urllib.error
import urllib.request


def request(base, method, path, body=None, headers=None, timeout=60):
    """`path` is relative to the server root (base without its /v1); a dict body is sent as JSON."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(base.replace("/v1", "") + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def metric(base, name):
    _, _, text = request(base, "GET", "/metrics")
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric " + name)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
