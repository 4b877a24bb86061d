#!/usr/bin/env python3
"""Time to first token of a 3-turn chat against `deltafin serve`, with and without
conversation state reuse (docs/PERFORMANCE.md).

  tools/bench_serve_ttft.py BASE_URL [--max-tokens N] [--reasoning-effort E] [--repeat R]

Each turn is a streamed /v1/chat/completions request whose messages are the previous turns
(with the answers exactly as the server returned them, reasoning_content included) plus a new
user message. "reuse" runs the turns back to back, so each prompt extends the saved state;
"fresh" sends an unrelated 1-token request before each turn, so the state never matches and
every turn prefills its whole prompt. TTFT = request sent -> first SSE data event.
"""
import argparse
import json
import time
import urllib.request

USER_TURNS = [
    "Hello! I am planning a trip to Paris next spring. What should I see first?",
    "Thanks. Which museums are open late, and how long should I plan for each one?",
    "Great. Can you put that into a three-day plan with times for every stop?",
]


def stream_turn(base, messages, args):
    body = {"messages": messages, "stream": True, "max_tokens": args.max_tokens,
            "stream_options": {"include_usage": True}, "reasoning_effort": args.reasoning_effort}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft, content, reasoning, usage = None, "", "", None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if ttft is None:
                ttft = time.monotonic() - t0
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for c in chunk["choices"]:
                content += c["delta"].get("content") or ""
                reasoning += c["delta"].get("reasoning_content") or ""
    return ttft, content, reasoning, usage


def chat(base, args, fresh):
    messages, rows = [], []
    for turn, text in enumerate(USER_TURNS):
        if fresh:
            stream_turn(base, [{"role": "user", "content": f"unrelated {turn}"}],
                        argparse.Namespace(max_tokens=1, reasoning_effort=args.reasoning_effort))
        messages.append({"role": "user", "content": text})
        ttft, content, reasoning, usage = stream_turn(base, messages, args)
        rows.append((turn + 1, usage["prompt_tokens"],
                     usage["prompt_tokens_details"]["cached_tokens"], ttft))
        messages.append({"role": "assistant", "content": content, "reasoning_content": reasoning})
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("base_url")
    p.add_argument("--max-tokens", type=int, default=1)
    p.add_argument("--reasoning-effort", default="max")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    base = args.base_url.rstrip("/")
    print("mode   turn  prompt_tokens  cached_tokens  ttft_s (median of %d)" % args.repeat)
    for mode in ("fresh", "reuse"):
        runs = [chat(base, args, mode == "fresh") for _ in range(args.repeat)]
        for i in range(len(USER_TURNS)):
            ttfts = sorted(r[i][3] for r in runs)
            turn, prompt, cached, _ = runs[-1][i]
            print(f"{mode:6} {turn:4}  {prompt:13}  {cached:13}  {ttfts[len(ttfts) // 2]:.3f}")


if __name__ == "__main__":
    main()
