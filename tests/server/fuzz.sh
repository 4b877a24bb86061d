#!/usr/bin/env bash
# Bounded libFuzzer run of the server's request bodies through parsing, chat rendering, output
# assembly and response JSON (fuzz_request.cc) with ASan and UBSan.   tests/server/fuzz.sh OUT_DIR [SECONDS (default 30)]
# Built with Debian's clang directly (the project's build uses g++, which has no libFuzzer).
set -euo pipefail
out=$1
secs=${2:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$root/src" -I"$root/include" -DDF_FUZZ_MODEL_DIR="\"$root/tests/data/golden/tiny-k3\"" \
  "$root/tests/server/fuzz_request.cc" \
  "$root"/src/server/{request,output,stop_matcher,response_json,anthropic_api,responses_api}.cc \
  "$root/src/constrain/json_constraint.cc" \
  "$root"/src/tokenizer/{utf8,vocab,pretokenizer,bpe,tokenizer,chat_template,chat_parser}.cc \
  "$root/src/io/mapped_file.cc" "$root/src/base/log.cc" \
  $(pkg-config --cflags --libs libpcre2-8) -lpthread -o "$out/fuzz_request"
# Seeds: a full chat request with tools and tool results, and a completion.
cat >"$out/corpus/chat" <<'JSON'
0{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"stream":true,"stream_options":{"include_usage":true},"stop":["x","y"],"max_completion_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":3,"seed":1,"reasoning_effort":"low"}
JSON
printf '1{"prompt":"Hello <|open|> world","max_tokens":3,"echo":true,"stop":"\\n"}' >"$out/corpus/completion"
printf '1{"prompt":[1,2,3,4000000000]}' >"$out/corpus/ids"
# /v1/messages (first byte 2 mod 4) and /v1/responses (3 mod 4), with tools and tool round trips.
cat >"$out/corpus/messages" <<'JSON'
2{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":""},{"type":"text","text":"a"},{"type":"tool_use","id":"tu1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":[{"type":"text","text":"42"}]},{"type":"text","text":"go"}]}],"tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},"stop_sequences":["x"],"thinking":{"type":"enabled","budget_tokens":4000},"stream":true}
JSON
cat >"$out/corpus/responses" <<'JSON'
3{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"r"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c1","output":"42"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"required","max_output_tokens":5,"reasoning":{"effort":"low"},"store":true,"stream":true}
JSON
"$out/fuzz_request" -max_total_time="$secs" -max_len=4096 -timeout=10 "$out/corpus" 2>&1 | tail -4
