"""Reading and writing K3 checkpoints in the Hugging Face layout of a real Kimi-K3 download.

Layout facts reproduced (K3 model specification sections 1-3): tensor names prefixed
`language_model.model.` (decoder) / `language_model.` (lm_head); BF16 spine with F32 for A_log,
dt_bias, the conv1d weights, o_norm and e_score_correction_bias; routed experts as compressed-tensors
MXFP4 (`weight_packed` U8 [R, C/2], low nibble = even element; `weight_scale` U8 [R, C/32], E8M0 with
bias 127, one scale per 32 inputs of a row); shards `model-NNNNN-of-MMMMMM.safetensors` ordered like
common writers (dtype width descending, then name), so each expert's six tensors are contiguous in
spec order and a layer's experts form one run; `model.safetensors.index.json` with a weight map.

Only numpy and torch are used (no `safetensors` package is installed from Debian).
"""

import json
import os
import re
import struct

import numpy as np
import torch

DECODER_PREFIX = "language_model.model."
LM_HEAD = "language_model.lm_head.weight"

# E2M1 magnitudes by 3-bit code (sign is bit 3).
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
E2M1_SIGNED = np.concatenate([E2M1, -E2M1])
# Scale bytes must stay in [2, 252], where the engine's exponent-add kernel is exact.
MIN_SCALE, MAX_SCALE = 2, 252

# Parameters stored without a ".weight" suffix in the model but with one in K3's names.
_BARE_WEIGHTS = {"embed_tokens", "norm", "input_layernorm", "post_attention_layernorm",
                 "q_conv1d", "k_conv1d", "v_conv1d", "o_norm", "q_a_layernorm", "kv_a_layernorm",
                 "routed_expert_norm"}
_F32_SUFFIXES = ("A_log", "dt_bias", "conv1d.weight", "o_norm.weight", "e_score_correction_bias")


def hf_name(key):
    """Model state_dict key -> K3 tensor name (experts are handled separately)."""
    if key == "lm_head":
        return LM_HEAD
    # The tail query first: "output_attn_res.norm" also ends with "attn_res.norm".
    for ours, theirs in (("output_attn_res.norm", "output_attn_res_norm.weight"),
                         ("output_attn_res.proj", "output_attn_res_proj.weight"),
                         ("attn_res.norm", "self_attention_res_norm.weight"),
                         ("attn_res.proj", "self_attention_res_proj.weight"),
                         ("mlp_res.norm", "mlp_res_norm.weight"),
                         ("mlp_res.proj", "mlp_res_proj.weight"),
                         ("block_sparse_moe.e_score_correction_bias",
                          "block_sparse_moe.gate.e_score_correction_bias")):
        if key.endswith(ours):
            return DECODER_PREFIX + key[: -len(ours)] + theirs
    if key.split(".")[-1] in _BARE_WEIGHTS:
        key += ".weight"
    return DECODER_PREFIX + key


def is_f32(name):
    return name.endswith(_F32_SUFFIXES)


# ------------------------------------------------------------------------------------------------
# MXFP4
# ------------------------------------------------------------------------------------------------


def mxfp4_quantize(w):
    """fp32 [R, C] -> (packed U8 [R, C/2], scale U8 [R, C/32]). Scale 2^ceil(log2(amax/6)) per 32
    inputs, elements rounded to the nearest E2M1 value with ties to the even code (spec 7)."""
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape
    groups = w.reshape(rows, cols // 32, 32)
    amax = np.abs(groups).max(-1)
    with np.errstate(divide="ignore"):
        exp = np.ceil(np.log2(amax / 6.0))
    exp = np.where(amax > 0, exp, MIN_SCALE - 127)
    scale = np.clip(exp + 127, MIN_SCALE, MAX_SCALE).astype(np.uint8)
    x = groups / np.exp2(scale.astype(np.float32) - 127)[..., None]
    mag = np.abs(x)
    # Round to nearest; at the midpoints pick the even code (0, 2, 4, 6 -> 0, 1, 2, 4).
    code = np.select(
        [mag <= 0.25, mag < 0.75, mag <= 1.25, mag < 1.75, mag <= 2.5, mag < 3.5, mag <= 5.0],
        [0, 1, 2, 3, 4, 5, 6], default=7).astype(np.uint8)
    code |= ((x < 0) & (code != 0)).astype(np.uint8) << 3
    code = code.reshape(rows, cols)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale


def mxfp4_dequantize(packed, scale):
    """Exact decode: element 2j is the low nibble of byte j, times 2^(scale - 127)."""
    packed = np.asarray(packed, dtype=np.uint8)
    rows = packed.shape[0]
    codes = np.empty((rows, packed.shape[1] * 2), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    vals = E2M1_SIGNED[codes].reshape(rows, -1, 32)
    return (vals * np.exp2(scale.astype(np.float32) - 127)[..., None]).reshape(rows, -1)


def mxfp4_roundtrip(w):
    """What the exported checkpoint will hold for an fp32 expert matrix."""
    return mxfp4_dequantize(*mxfp4_quantize(w))


# ------------------------------------------------------------------------------------------------
# safetensors
# ------------------------------------------------------------------------------------------------

_NP_DTYPES = {"F32": np.float32, "U8": np.uint8, "BF16": np.uint16}


def read_safetensors(path):
    """{name: numpy array}; BF16 is widened exactly to float32."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype=_NP_DTYPES[meta["dtype"]]).reshape(meta["shape"])
        if meta["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out


def read_checkpoint(model_dir):
    index = json.load(open(os.path.join(model_dir, "model.safetensors.index.json")))
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(read_safetensors(os.path.join(model_dir, shard)))
    return tensors


def bf16_bytes(t):
    """Round-to-nearest-even fp32 -> BF16 (torch's conversion), as raw little-endian bytes."""
    return torch.as_tensor(t, dtype=torch.float32).to(torch.bfloat16).view(torch.int16).numpy()


def write_safetensors(path, entries):
    """entries: list of (name, dtype, numpy array) already in file order."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, dtype, arr in entries:
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)  # pad the header to a multiple of 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    return offset


# ------------------------------------------------------------------------------------------------
# Model <-> checkpoint
# ------------------------------------------------------------------------------------------------


def _expert_names(layer, e):
    base = f"{DECODER_PREFIX}layers.{layer}.block_sparse_moe.experts.{e}."
    return {w: (base + w + ".weight_packed", base + w + ".weight_scale") for w in ("w1", "w2", "w3")}


def load_into(model, tensors):
    """Fill a K3Model from a {name: array} dict (MXFP4 experts decoded exactly). Every tensor of the
    checkpoint must be used and every parameter filled."""
    used = set()
    state = model.state_dict()
    with torch.no_grad():
        for key, value in state.items():
            if re.search(r"block_sparse_moe\.w[123]$", key):
                layer = int(key.split(".")[1])
                which = key[-2:]
                for e in range(value.shape[0]):
                    packed, scale = _expert_names(layer, e)[which]
                    value[e].copy_(torch.from_numpy(
                        mxfp4_dequantize(tensors[packed], tensors[scale])))
                    used.update((packed, scale))
                continue
            name = hf_name(key)
            arr = tensors[name]
            if arr.shape != tuple(value.shape):
                raise ValueError(f"{name}: checkpoint shape {arr.shape} != model {tuple(value.shape)}")
            value.copy_(torch.from_numpy(np.array(arr, dtype=np.float32)))
            used.add(name)
    unused = set(tensors) - used
    if unused:
        raise ValueError(f"checkpoint tensors not used by the model: {sorted(unused)[:5]}")


def export_tensors(model):
    """[(name, dtype, array)] for every tensor of the checkpoint, experts quantised to MXFP4."""
    out = []
    for key, value in model.state_dict().items():
        v = value.detach().float().cpu()
        if re.search(r"block_sparse_moe\.w[123]$", key):
            layer = int(key.split(".")[1])
            which = key[-2:]
            for e in range(v.shape[0]):
                packed, scale = mxfp4_quantize(v[e].numpy())
                pn, sn = _expert_names(layer, e)[which]
                out += [(pn, "U8", packed), (sn, "U8", scale)]
            continue
        name = hf_name(key)
        if is_f32(name):
            out.append((name, "F32", v.numpy().astype(np.float32)))
        else:
            out.append((name, "BF16", bf16_bytes(v)))
    return out


def _file_order(entry):
    name, dtype, _ = entry
    width = {"F32": 4, "BF16": 2, "U8": 1}[dtype]
    return (-width, name)


def write_checkpoint(model, out_dir, max_shard_bytes):
    """Shards: the spine in layer order, then each MoE layer's experts as one run, packed greedily
    into shards below max_shard_bytes; each shard sorted in writer order."""
    os.makedirs(out_dir, exist_ok=True)
    entries = export_tensors(model)
    size = lambda e: e[2].nbytes
    groups = {}  # layer (or -1 for globals) -> spine entries; ("experts", layer) -> expert entries
    for e in entries:
        m = re.match(re.escape(DECODER_PREFIX) + r"layers\.(\d+)\.", e[0])
        layer = int(m.group(1)) if m else -1
        key = ("experts", layer) if ".experts." in e[0] else ("spine", layer)
        groups.setdefault(key, []).append(e)
    spine_keys = sorted((k for k in groups if k[0] == "spine"), key=lambda k: (k[1] < 0, k[1]))
    expert_keys = sorted((k for k in groups if k[0] == "experts"), key=lambda k: k[1])
    shards, current = [], []
    for key in spine_keys + expert_keys:
        group = groups[key]
        # A spine group may be split tensor by tensor; an expert run stays whole.
        pieces = [group] if key[0] == "experts" else [[e] for e in group]
        for piece in pieces:
            if current and sum(map(size, current)) + sum(map(size, piece)) > max_shard_bytes:
                shards.append(current)
                current = []
            current += piece
    if current:
        shards.append(current)
    weight_map, total = {}, 0
    files = []
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):06d}.safetensors"
        shard.sort(key=_file_order)
        total += write_safetensors(os.path.join(out_dir, fname), shard)
        weight_map.update({e[0]: fname for e in shard})
        files.append(fname)
    index = {"metadata": {"total_size": total},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return files
