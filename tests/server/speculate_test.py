"""`deltafin serve --speculate ngram` against `--speculate off` on the bundled demo model (driven
by run_speculate_test.sh): greedy answers are identical, streamed and not, on prompts that repeat
a passage (so drafts are proposed), across a conversation that reuses the saved state, and the
speculative server's /metrics counts its verify passes and drafts.
Usage: speculate_test.py SPEC_BASE_URL OFF_BASE_URL"""
import json
import sys

import serve_client  # beside this file

SPEC, OFF = sys.argv[1], sys.argv[2]
PASSAGE = ("In the beginning God created the heaven and the earth. And the earth was without "
           "form, and void; and darkness was upon the face of the deep. And the Spirit of God "
           "moved upon the face of the waters. And God said, Let there be light: and there was "
           "light. ")


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def post(base, path, body):
    status, _, raw = serve_client.request(base, "POST", path, body, timeout=300)
    check(status == 200, f"{path}: {status} {raw[:300]!r}")
    return json.loads(raw)


def complete(base, prompt, n=48):
    r = post(base, "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    return r["choices"][0]["text"]


def chat(base, messages, n=40, stream=False):
    body = {"messages": messages, "max_tokens": n, "temperature": 0,
            "chat_template_kwargs": {"thinking": False}}
    if not stream:
        return post(base, "/v1/chat/completions", body)["choices"][0]["message"]["content"]
    body["stream"] = True
    status, _, raw = serve_client.request(base, "POST", "/v1/chat/completions", body, timeout=300)
    check(status == 200, f"stream: {status}")
    text = ""
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:])["choices"]:
                text += c["delta"].get("content") or ""
    return text


prompts = [PASSAGE + PASSAGE + "In the beginning", PASSAGE + "And God said, Let there be",
           "And God said, And God said, And God said,"]
for i, p in enumerate(prompts):
    a, b = complete(SPEC, p), complete(OFF, p)
    check(a == b, f"completion {i} differs:\n spec {a!r}\n off  {b!r}")
print(f"ok - {len(prompts)} greedy completions identical with --speculate ngram and off")

conv = [{"role": "user", "content": "Say the first verses of Genesis."},
        {"role": "assistant", "content": PASSAGE},
        {"role": "user", "content": "Say them again."}]
a, b = chat(SPEC, conv), chat(OFF, conv)
check(a == b, f"chat differs:\n spec {a!r}\n off  {b!r}")
s = chat(SPEC, conv, stream=True)
check(s == a, f"streamed chat differs from whole:\n stream {s!r}\n whole  {a!r}")
print("ok - a chat that repeats an earlier turn: identical, and streamed equals whole")

# A conversation that continues from the saved state (the client sends the answer back).
first = PASSAGE + "And God saw"
a1, b1 = complete(SPEC, first, 20), complete(OFF, first, 20)
check(a1 == b1, "continuation's first part differs")
a2, b2 = complete(SPEC, first + a1 + " And", 30), complete(OFF, first + b1 + " And", 30)
check(a2 == b2, f"continued completion differs:\n spec {a2!r}\n off  {b2!r}")
print("ok - a continued prompt (state reused) gives identical answers")

# Unseeded sampling goes through the speculative path too; it must answer in full.
r = post(SPEC, "/v1/completions", {"prompt": PASSAGE + PASSAGE, "max_tokens": 24,
                                   "temperature": 0.8, "top_p": 0.95})
check(r["usage"]["completion_tokens"] >= 1, str(r))

passes = serve_client.metric(SPEC, "deltafin_speculative_passes_total")
drafted = serve_client.metric(SPEC, "deltafin_speculative_drafted_total")
accepted = serve_client.metric(SPEC, "deltafin_speculative_accepted_total")
check(passes > 0 and drafted > 0, f"no verify passes drafted: {passes} passes, {drafted} drafted")
check(serve_client.metric(OFF, "deltafin_speculative_passes_total") == 0, "off server speculated")
print(f"ok - /metrics: {passes:.0f} speculative passes, {accepted:.0f} of {drafted:.0f} drafts "
      "accepted; none with --speculate off")
