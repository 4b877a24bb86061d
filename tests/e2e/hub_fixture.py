#!/usr/bin/env python3
"""A local Hugging Face hub for the setup tests: nginx serves a generated model laid out as a hub
repository, a fault-injecting proxy sits in front of it, everything on 127.0.0.1.

  www/api/models/{repo}/revision/{main,<sha>}   the revision API's JSON (static, ?blobs=true form)
  www/{repo}/resolve/{sha}/{file}               the files (hard links to the model); main -> sha

Servers (nginx, run unprivileged with its own prefix, `daemon off`, killed with this process):
  hub  127.0.0.1:H  requires "Authorization: Bearer <token>" (else 401); *.safetensors answer
                    302 to http://localhost:<cdn proxy>/..., like the hub's LFS redirects
  cdn  127.0.0.1:C  serves the same files without auth and answers 403 to any request that
                    carries an Authorization header (a leaked token fails the download)
Proxy (this process): 127.0.0.1:HP -> hub, 127.0.0.1:CP -> cdn. Per request it reads the rules
file (a JSON list) and applies the first rule whose "path" is a substring of the request path
(and whose "port", if given, is "hub" or "cdn" as the request's) and that has fired fewer than
"times" times (drop and corrupt fire only when the response reaches their byte):
  {"id": "x", "path": "...", "port": "cdn"?, "times": N (default 1, -1 = always),
   "action": "status", "status": 404,            answer with that status, no upstream request
   "retry_after": "2"?}                          (and that Retry-After header)
   "action": "drop", "at": OFFSET}               close the connection once the body reaches file
                                                 byte OFFSET
   "action": "corrupt", "at": OFFSET}            flip the bits of file byte OFFSET
   "action": "rate", "bytes_per_second": R}      throttle the body: nginx's limit_rate, set per
                                                 request from the X-Limit-Rate header the proxy
                                                 adds upstream
Every request is logged as one JSON line: {"port": "hub"|"cdn", "client" (the client's TCP port,
one per connection), "path", "range", "auth", "status", "sent"}. Prints one JSON line with the ports and paths, then serves until stdin closes.

Usage: hub_fixture.py --model DIR --root DIR --token TOKEN [--repo ORG/NAME]
"""
import argparse, ctypes, hashlib, http.client, http.server, json, os, shutil, signal, socket
import socketserver, subprocess, sys, threading, time

SHA = "0123456789abcdef0123456789abcdef01234567"


def die_with_parent():
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def sibling(path, full):
    data = open(full, "rb").read()
    entry = {"rfilename": path, "size": len(data),
             "blobId": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
    if path.endswith(".safetensors"):
        entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return entry


def write_api(www, repo, siblings):
    d = os.path.join(www, "api", "models", repo, "revision")
    os.makedirs(d, exist_ok=True)
    for name in ("main", SHA):
        with open(os.path.join(d, name), "w") as f:
            json.dump({"id": repo, "sha": SHA, "siblings": siblings}, f)


def build_tree(model, www, repo):
    files = sorted(os.listdir(model))
    resolve = os.path.join(www, repo, "resolve")
    os.makedirs(os.path.join(resolve, SHA), exist_ok=True)
    for name in files:
        dst = os.path.join(resolve, SHA, name)
        if not os.path.exists(dst):
            try:
                os.link(os.path.join(model, name), dst)
            except OSError:
                shutil.copy(os.path.join(model, name), dst)
    if not os.path.exists(os.path.join(resolve, "main")):
        os.symlink(SHA, os.path.join(resolve, "main"))
    write_api(www, repo, [sibling(n, os.path.join(model, n)) for n in files])
    # Listings that must be refused before anything is written.
    cfg = sibling("config.json", os.path.join(model, "config.json"))
    write_api(www, "evil/dotdot", [cfg, dict(cfg, rfilename="../escaped.json")])
    write_api(www, "evil/abs", [cfg, dict(cfg, rfilename="/tmp/deltafin-abs-escape.json")])


NGINX_CONF = """
daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/nginx-error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {root}/tmp/body; proxy_temp_path {root}/tmp/proxy;
  fastcgi_temp_path {root}/tmp/fcgi; uwsgi_temp_path {root}/tmp/uwsgi; scgi_temp_path {root}/tmp/scgi;
  default_type application/octet-stream;
  types {{ application/json json; }}
  log_format auth '$request_uri "$http_authorization" $status';
  # The proxy's "rate" rules: nginx throttles the response body (0: unlimited).
  map $http_x_limit_rate $df_limit_rate {{ default 0; "~^[0-9]+$" $http_x_limit_rate; }}
  limit_rate $df_limit_rate;
  server {{
    listen 127.0.0.1:{hub};
    root {www};
    access_log {root}/hub-access.log auth;
    if ($http_authorization != "Bearer {token}") {{ return 401; }}
    location /api/ {{ default_type application/json; }}
    location ~ \\.safetensors$ {{ return 302 http://localhost:{cdn_proxy}$request_uri; }}
  }}
  server {{
    listen 127.0.0.1:{cdn};
    root {www};
    access_log {root}/cdn-access.log auth;
    if ($http_authorization != "") {{ return 403; }}
  }}
}}
"""


class Rules:
    def __init__(self, path):
        self.path, self.used, self.lock = path, {}, threading.Lock()

    def match(self, port, request_path):
        """The first rule for this request that has not fired `times` times yet."""
        try:
            rules = json.load(open(self.path))
        except (OSError, ValueError):
            return None
        with self.lock:
            for r in rules:
                if r.get("path", "") not in request_path or r.get("port", port) != port:
                    continue
                times = r.get("times", 1)
                if times >= 0 and self.used.get(self.key(r), 0) >= times:
                    continue
                return r
        return None

    @staticmethod
    def key(rule):
        return rule.get("id", json.dumps(rule, sort_keys=True))

    def fire(self, rule):
        """Counts one application of a rule (drop/corrupt count only when their byte passes)."""
        with self.lock:
            self.used[self.key(rule)] = self.used.get(self.key(rule), 0) + 1


def make_handler(name, upstream_port, rules, log_path, log_lock):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def log(self, status, sent):
            with log_lock, open(log_path, "a") as f:
                f.write(json.dumps({"port": name, "client": self.client_address[1],
                                    "path": self.path,
                                    "range": self.headers.get("Range", ""),
                                    "auth": self.headers.get("Authorization") is not None,
                                    "status": status, "sent": sent}) + "\n")

        def do_GET(self):
            rule = rules.match(name, self.path)
            if rule and rule["action"] in ("status", "rate"):
                rules.fire(rule)
            if rule and rule["action"] == "status":
                body = b"injected\n"
                self.send_response(rule["status"])
                if "retry_after" in rule:
                    self.send_header("Retry-After", str(rule["retry_after"]))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.log(rule["status"], 0)
                return
            conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("connection", "x-limit-rate")}
            if rule and rule["action"] == "rate":
                headers["X-Limit-Rate"] = str(int(rule["bytes_per_second"]))
            conn.request("GET", self.path, headers=headers)
            resp = conn.getresponse()
            first = 0
            cr = resp.getheader("Content-Range", "")
            if resp.status == 206 and cr.startswith("bytes "):
                first = int(cr[6:].split("-")[0])
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("connection", "keep-alive", "server", "date"):
                    self.send_header(k, v)
            self.end_headers()
            sent, pos = 0, first
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                if rule and rule["action"] == "corrupt" and pos <= rule["at"] < pos + len(chunk):
                    i = rule["at"] - pos
                    rules.fire(rule)
                    chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1:]
                if rule and rule["action"] == "drop" and pos + len(chunk) > rule["at"]:
                    rules.fire(rule)
                    part = chunk[:max(0, rule["at"] - pos)]
                    self.wfile.write(part)
                    self.wfile.flush()
                    sent += len(part)
                    self.log(resp.status, sent)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    conn.close()
                    return
                try:
                    self.wfile.write(chunk)
                except OSError:
                    self.log(resp.status, sent)
                    conn.close()
                    self.close_connection = True
                    return
                sent += len(chunk)
                pos += len(chunk)
            conn.close()
            self.log(resp.status, sent)

    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # Clients that vanish mid-response (kill -9, dropped connections) are the tests' point.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--repo", default="deltafin-test/tiny-k3")
    a = ap.parse_args()
    die_with_parent()
    root = os.path.abspath(a.root)
    www = os.path.join(root, "www")
    for d in ("tmp", "www"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    build_tree(os.path.abspath(a.model), www, a.repo)
    hub, cdn, hub_proxy, cdn_proxy = free_port(), free_port(), free_port(), free_port()
    conf = os.path.join(root, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(root=root, www=www, hub=hub, cdn=cdn, cdn_proxy=cdn_proxy,
                                  token=a.token))
    nginx = subprocess.Popen(["nginx", "-p", root, "-c", conf, "-e", os.path.join(root, "nginx-error.log")],
                             preexec_fn=die_with_parent)
    rules_path, log_path = os.path.join(root, "rules.json"), os.path.join(root, "proxy.log")
    open(rules_path, "w").write("[]")
    open(log_path, "w").close()
    rules, log_lock = Rules(rules_path), threading.Lock()
    servers = []
    for name, listen, upstream in (("hub", hub_proxy, hub), ("cdn", cdn_proxy, cdn)):
        s = Server(("127.0.0.1", listen), make_handler(name, upstream, rules, log_path, log_lock))
        threading.Thread(target=s.serve_forever, daemon=True).start()
        servers.append(s)
    for port in (hub, cdn):  # wait for nginx
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if nginx.poll() is not None:
                    sys.exit("nginx exited: " + open(os.path.join(root, "nginx-error.log")).read())
                time.sleep(0.05)
    print(json.dumps({"endpoint": "http://127.0.0.1:%d" % hub_proxy, "repo": a.repo, "sha": SHA,
                      "rules": rules_path, "log": log_path,
                      "cdn_access": os.path.join(root, "cdn-access.log"),
                      "hub_access": os.path.join(root, "hub-access.log")}), flush=True)
    try:
        sys.stdin.read()  # until the test closes our stdin (or dies)
    finally:
        nginx.terminate()
        nginx.wait()


if __name__ == "__main__":
    main()
