#!/usr/bin/env bash
# fio on a model's expert shards with the engine's expert-read pattern, for comparison with the
# disk bandwidth `deltafin bench decode` measures (docs/PERFORMANCE.md): random reads of one
# expert span each, O_DIRECT, one synchronous read per job and as many jobs as the engine has I/O
# threads (the queue depth).
#   tools/fio_experts.sh MODEL_DIR [IO_THREADS=8] [SECONDS=10]
set -euo pipefail
model=${1:?model dir}
jobs=${2:-8}
seconds=${3:-10}
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 1; }
# Expert shards and the span size, from the index and config.
read -r files bs < <(python3 - "$model" <<'PY'
import json, sys, os
d = sys.argv[1]
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
cfg = json.load(open(os.path.join(d, "config.json")))
tc = cfg.get("text_config", cfg)
inter, latent = tc["moe_intermediate_size"], tc["routed_expert_hidden_size"]
span = 3 * (inter * latent // 2 + inter * latent // 32)
# The aligned read of a span that starts mid-block covers one more 4 KiB block.
bs = (span + 4095) // 4096 * 4096 + 4096
shards = sorted({f for n, f in idx.items() if ".experts." in n})
print(":".join(s.replace(":", "\\:") for s in shards), bs)
PY
)
echo "fio: random ${bs}-byte O_DIRECT reads, ${jobs} jobs x queue depth 1, ${seconds} s, $(tr ':' '\n' <<<"$files" | wc -l) files"
fio --name=experts --directory="$model" --filename="$files" --file_service_type=random --rw=randread --bs="$bs" \
  --direct=1 --ioengine=psync --numjobs="$jobs" --group_reporting --time_based \
  --runtime="$seconds" --norandommap --output-format=json |
  python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print("fio read: %.3f GB/s (%d reads)" % (j["io_bytes"]/j["runtime"]*1000/1e9, j["total_ios"]))'
