"""A readable PyTorch implementation of the Kimi K3 text model (the K3 model specification, sections 3-4).

This is the project's second, independent K3 forward pass: it shares no code with the C++ engine
and is used both to train the small demo model (training/train.py) and to check the engine's
`deltafin logits` on trained weights (training/check_agreement.py).

The model, layer by layer:
  * embedding (no positional encoding), Block Attention Residuals (AttnRes) instead of a plain
    residual stream: each sub-layer reads a softmax mix, over depth, of the completed blocks and
    the running partial sum, scored by a learned pseudo-query;
  * attention layers on K3's schedule: Kimi Delta Attention (KDA: short causal convolutions on
    q/k/v, l2-normalised q/k, delta-rule recurrence with a per-channel decay gate
    -5*sigmoid(exp(A_log[head]) * (f + dt_bias)), gated per-head RMSNorm output) and gated NoPE
    MLA (LoRA queries and a compressed KV latent, no rotary embedding, sigmoid output gate);
  * layer 0 a dense SiTU FFN, every other layer a LatentMoE: a sigmoid router whose correction
    bias only chooses the experts (grouped top-k, K3's "noaux_tc"), routed experts running in a
    smaller latent space with an RMSNorm after their weighted sum, plus two shared experts
    (one fused MLP) at full width.

Two numerically different but mathematically identical execution modes:
  * `exact=True`  (evaluation): the KDA recurrence token by token and fp32/fp64 throughout, ties in
    the router broken towards the lower expert id, like the engine;
  * `exact=False` (training): KDA in the chunked (WY) form, which is the same function computed
    with matrix products so that it trains at a useful speed.

Checkpoints are read and written in K3's Hugging Face layout by training/k3_checkpoint.py.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LORA_NORM_EPS = 1e-6  # MLA q_a/kv_a layernorms: the HF reference's class default (spec 4.2)
L2NORM_EPS = 1e-6  # fla's in-kernel l2norm: u / sqrt(sum u^2 + 1e-6)


class K3Config:
    """The text_config fields the forward pass needs, read from a K3 config.json dict."""

    def __init__(self, root):
        t = root["text_config"]
        la = t["linear_attn_config"]
        self.vocab_size = t["vocab_size"]
        self.hidden_size = t["hidden_size"]
        self.intermediate_size = t["intermediate_size"]
        self.num_layers = t["num_hidden_layers"]
        self.rms_eps = t["rms_norm_eps"]
        self.situ_beta = t["activation_situ_beta"]
        self.situ_linear_beta = t["activation_situ_linear_beta"]
        self.block_size = t["attn_res_block_size"]
        self.mla_heads = t["num_attention_heads"]
        self.q_lora_rank = t["q_lora_rank"]
        self.kv_lora_rank = t["kv_lora_rank"]
        self.nope_dim = t["qk_nope_head_dim"]
        self.rope_dim = t["qk_rope_head_dim"]
        self.v_dim = t["v_head_dim"]
        self.kda_heads = la["num_heads"]
        self.kda_head_dim = la["head_dim"]
        self.conv_size = la["short_conv_kernel_size"]
        self.gate_lower_bound = la["gate_lower_bound"]
        mla_layers = set(la["full_attn_layers"])  # one-based
        self.is_mla = [(i + 1) in mla_layers for i in range(self.num_layers)]
        self.first_dense = t["first_k_dense_replace"]
        self.num_experts = t["num_experts"]
        self.top_k = t["num_experts_per_token"]
        self.num_shared = t["num_shared_experts"]
        self.moe_inter = t["moe_intermediate_size"]
        self.latent = t["routed_expert_hidden_size"]
        self.latent_norm = t["latent_moe_use_norm"]
        self.n_group = t["num_expert_group"] if t.get("use_grouped_topk", True) else 1
        self.topk_group = t["topk_group"] if t.get("use_grouped_topk", True) else 1
        self.renormalize = t["moe_renormalize"]
        self.routed_scale = t["routed_scaling_factor"]

    @property
    def kda_width(self):
        return self.kda_heads * self.kda_head_dim


def rms_norm(x, weight, eps):
    """Normalise, then multiply by the weight (the reference order); no centring, no offset."""
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x if weight is None else weight * x


def situ(gate, up, beta, linear_beta):
    """SiTU(gate, up) = [beta*tanh(gate/beta) * sigmoid(gate)] * [lb*tanh(up/lb)] (spec 4.6)."""
    bounded_gate = torch.tanh(gate / beta) * beta
    bounded_up = torch.tanh(up / linear_beta) * linear_beta
    return (bounded_gate * torch.sigmoid(gate)) * bounded_up


def l2norm(u):
    return u / torch.sqrt(u.pow(2).sum(-1, keepdim=True) + L2NORM_EPS)


def linear(out_features, in_features, std):
    layer = nn.Linear(in_features, out_features, bias=False)
    nn.init.normal_(layer.weight, std=std)
    return layer


class AttnResQuery(nn.Module):
    """A pseudo-query (norm weight and projection row) that scores AttnRes sources (spec 4.3)."""

    def __init__(self, cfg):
        super().__init__()
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        # Zero projection: every source scores 0, so a new model starts with a uniform depth mix.
        self.proj = nn.Parameter(torch.zeros(1, cfg.hidden_size))
        self.eps = cfg.rms_eps

    def mix(self, sources):
        """softmax over sources of <rmsnorm(v_j), norm*proj>, applied to the un-normalised v_j."""
        v = torch.stack(sources, dim=0)  # [S, ..., H]
        query = self.norm * self.proj[0]
        scores = (rms_norm(v, None, self.eps) * query).sum(-1)  # [S, ...]
        alpha = torch.softmax(scores, dim=0)
        return (alpha.unsqueeze(-1) * v).sum(0)


class GatedMlp(nn.Module):
    """down(SiTU(gate(x), up(x))): the dense layer-0 FFN and the fused shared experts."""

    def __init__(self, cfg, width, out_std):
        super().__init__()
        h = cfg.hidden_size
        self.gate_proj = linear(width, h, h**-0.5)
        self.up_proj = linear(width, h, h**-0.5)
        self.down_proj = linear(h, width, out_std)
        self.beta, self.linear_beta = cfg.situ_beta, cfg.situ_linear_beta

    def forward(self, x):
        a = situ(self.gate_proj(x), self.up_proj(x), self.beta, self.linear_beta)
        return self.down_proj(a)


class KimiDeltaAttention(nn.Module):
    def __init__(self, cfg, out_std):
        super().__init__()
        h, p, d = cfg.hidden_size, cfg.kda_width, cfg.kda_head_dim
        self.cfg = cfg
        self.q_proj = linear(p, h, h**-0.5)
        self.k_proj = linear(p, h, h**-0.5)
        self.v_proj = linear(p, h, h**-0.5)
        # Depthwise causal convolutions [P, 1, K]; tap K-1 multiplies the current position.
        bound = cfg.conv_size**-0.5
        self.q_conv1d = nn.Parameter(torch.empty(p, 1, cfg.conv_size).uniform_(-bound, bound))
        self.k_conv1d = nn.Parameter(torch.empty(p, 1, cfg.conv_size).uniform_(-bound, bound))
        self.v_conv1d = nn.Parameter(torch.empty(p, 1, cfg.conv_size).uniform_(-bound, bound))
        self.f_a_proj = linear(d, h, h**-0.5)
        self.f_b_proj = linear(p, d, d**-0.5)
        # Decay gate: dt_bias spread so that channels start with memories from ~1 to ~100 tokens;
        # A_log is stored padded to a multiple of 128 with zeros (one real entry per head).
        self.dt_bias = nn.Parameter(torch.empty(p).uniform_(-6.0, 1.0))
        a_len = (cfg.kda_heads + 127) // 128 * 128
        self.A_log = nn.Parameter(torch.zeros(a_len))
        self.b_proj = linear(cfg.kda_heads, h, h**-0.5)
        self.g_proj = linear(p, h, h**-0.5)
        self.o_norm = nn.Parameter(torch.ones(d))
        self.o_proj = linear(h, p, out_std)

    def _conv(self, u, weight):
        """silu(depthwise causal conv) over [B, T, P]; positions before the start are zero."""
        k = weight.shape[-1]
        y = F.conv1d(F.pad(u.transpose(1, 2), (k - 1, 0)), weight, groups=u.shape[-1])
        return F.silu(y.transpose(1, 2))

    def forward(self, x, exact):
        cfg = self.cfg
        b, t, _ = x.shape
        nh, d = cfg.kda_heads, cfg.kda_head_dim
        q = self._conv(self.q_proj(x), self.q_conv1d).view(b, t, nh, d)
        k = self._conv(self.k_proj(x), self.k_conv1d).view(b, t, nh, d)
        v = self._conv(self.v_proj(x), self.v_conv1d).view(b, t, nh, d)
        q = l2norm(q) / math.sqrt(d)
        k = l2norm(k)
        beta = torch.sigmoid(self.b_proj(x))  # [B, T, nh]
        f = self.f_b_proj(self.f_a_proj(x)).view(b, t, nh, d)
        a = torch.exp(self.A_log[:nh]).view(1, 1, nh, 1)  # one rate per head (spec 6.3 #1)
        g = cfg.gate_lower_bound * torch.sigmoid(a * (f + self.dt_bias.view(1, 1, nh, d)))
        # [B, nh, T, d] for the recurrence.
        q, k, v, g = (z.transpose(1, 2) for z in (q, k, v, g))
        beta = beta.transpose(1, 2)
        o = _kda_recurrent(q, k, v, g, beta) if exact else _kda_chunked(q, k, v, g, beta)
        o = o.transpose(1, 2)  # [B, T, nh, d]
        o = rms_norm(o, self.o_norm, cfg.rms_eps)
        o = o * torch.sigmoid(self.g_proj(x).view(b, t, nh, d))
        return self.o_proj(o.reshape(b, t, nh * d))


def _kda_recurrent(q, k, v, g, beta):
    """Token-by-token delta rule (spec 4.4): decay, error, write, read with the updated state."""
    b, nh, t, d = q.shape
    state = q.new_zeros(b, nh, d, d)  # S[k][v]
    out = []
    for i in range(t):
        state = state * torch.exp(g[:, :, i]).unsqueeze(-1)
        err = v[:, :, i] - torch.einsum("bhk,bhkv->bhv", k[:, :, i], state)
        state = state + beta[:, :, i, None, None] * k[:, :, i, :, None] * err[:, :, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, :, i], state))
    return torch.stack(out, dim=2)


def _kda_chunked(q, k, v, g, beta, chunk=16):
    """The same recurrence in chunks (spec 4.4, "chunked form"): within a chunk the delta rule is a
    unit-lower-triangular solve. Decay ratios exp(G_i - G_j) are factored through the chunk's
    middle position, exp(G_i - G_m) * exp(G_m - G_j); with g >= -5 and 16 positions each factor
    stays below e^40, inside fp32's range, so the ratios become plain matrix products."""
    b, nh, t, d = q.shape
    pad = (-t) % chunk
    if pad:
        q, k, v, g = (F.pad(z, (0, 0, 0, pad)) for z in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
    n = (t + pad) // chunk
    q, k, v, g = (z.reshape(b, nh, n, chunk, d) for z in (q, k, v, g))
    beta = beta.reshape(b, nh, n, chunk)
    G = torch.cumsum(g, dim=3)  # inclusive cumulative log decay per channel
    mid = G[:, :, :, chunk // 2 : chunk // 2 + 1, :]
    q_up = q * torch.exp(G - mid)
    k_up = k * torch.exp(G - mid)
    k_down = k * torch.exp(mid - G)
    idx = torch.arange(chunk)
    strict = idx[:, None] > idx[None, :]
    incl = idx[:, None] >= idx[None, :]
    kk = (k_up @ k_down.transpose(-1, -2)).masked_fill(~strict, 0.0)  # sum_c k_i e^{G_i-G_j} k_j
    lower = beta.unsqueeze(-1) * kk
    eye = torch.eye(chunk).expand_as(lower)
    rhs = torch.cat([beta.unsqueeze(-1) * torch.exp(G) * k, beta.unsqueeze(-1) * v], dim=-1)
    sol = torch.linalg.solve_triangular(eye + lower, rhs, upper=False, unitriangular=True)
    w, u = sol[..., :d], sol[..., d:]
    qk = (q_up @ k_down.transpose(-1, -2)).masked_fill(~incl, 0.0)  # zero for j > i
    decay_to_end = torch.exp(G[:, :, :, -1:, :] - G)  # e^{G_C - G_j}, exponent <= 0
    q_decayed = q * torch.exp(G)
    kv_in = (decay_to_end * k).transpose(-1, -2)
    state = q.new_zeros(b, nh, d, d)
    outs = []
    for c in range(n):
        v_new = u[:, :, c] - w[:, :, c] @ state
        outs.append(q_decayed[:, :, c] @ state + qk[:, :, c] @ v_new)
        state = torch.exp(G[:, :, c, -1]).unsqueeze(-1) * state + kv_in[:, :, c] @ v_new
    o = torch.stack(outs, dim=2).reshape(b, nh, n * chunk, d)
    return o[:, :, :t]


class GatedMla(nn.Module):
    """Multi-head latent attention without positional encoding and with a sigmoid output gate."""

    def __init__(self, cfg, out_std):
        super().__init__()
        h, nh = cfg.hidden_size, cfg.mla_heads
        self.cfg = cfg
        self.q_a_proj = linear(cfg.q_lora_rank, h, h**-0.5)
        self.q_a_layernorm = nn.Parameter(torch.ones(cfg.q_lora_rank))
        self.q_b_proj = linear(nh * (cfg.nope_dim + cfg.rope_dim), cfg.q_lora_rank,
                               cfg.q_lora_rank**-0.5)
        self.kv_a_proj_with_mqa = linear(cfg.kv_lora_rank + cfg.rope_dim, h, h**-0.5)
        self.kv_a_layernorm = nn.Parameter(torch.ones(cfg.kv_lora_rank))
        self.kv_b_proj = linear(nh * (cfg.nope_dim + cfg.v_dim), cfg.kv_lora_rank,
                                cfg.kv_lora_rank**-0.5)
        self.g_proj = linear(nh * cfg.v_dim, h, h**-0.5)
        self.o_proj = linear(h, nh * cfg.v_dim, out_std)

    def forward(self, x, exact):
        cfg = self.cfg
        b, t, _ = x.shape
        nh, nope, rope, vd = cfg.mla_heads, cfg.nope_dim, cfg.rope_dim, cfg.v_dim
        cq = rms_norm(self.q_a_proj(x), self.q_a_layernorm, LORA_NORM_EPS)
        q = self.q_b_proj(cq).view(b, t, nh, nope + rope)
        kv = self.kv_a_proj_with_mqa(x)
        ckv = rms_norm(kv[..., : cfg.kv_lora_rank], self.kv_a_layernorm, LORA_NORM_EPS)
        r = kv[..., cfg.kv_lora_rank :]  # shared by all heads, not normalised, not rotated
        e = self.kv_b_proj(ckv).view(b, t, nh, nope + vd)
        k = torch.cat([e[..., :nope], r.unsqueeze(2).expand(b, t, nh, rope)], dim=-1)
        val = e[..., nope:]
        q, k, val = (z.transpose(1, 2) for z in (q, k, val))  # [B, nh, T, .]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(nope + rope)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        o = torch.softmax(scores, dim=-1) @ val  # [B, nh, T, vd]
        o = o.transpose(1, 2) * torch.sigmoid(self.g_proj(x).view(b, t, nh, vd))
        return self.o_proj(o.reshape(b, t, nh * vd))


class LatentMoe(nn.Module):
    def __init__(self, cfg, out_std):
        super().__init__()
        h, e, lat, inter = cfg.hidden_size, cfg.num_experts, cfg.latent, cfg.moe_inter
        self.cfg = cfg
        self.gate = linear(e, h, h**-0.5)
        # Correction bias: chooses experts only; moved by the balancing rule, not by gradients.
        self.register_buffer("e_score_correction_bias", torch.zeros(e))
        self.routed_expert_down_proj = linear(lat, h, h**-0.5)
        self.routed_expert_norm = nn.Parameter(torch.ones(lat))
        self.routed_expert_up_proj = linear(h, lat, out_std)
        # Routed experts stacked: w1 (gate) and w3 (up) [E, inter, latent], w2 (down) [E, latent,
        # inter]; exported as experts.{e}.w1/w2/w3 in MXFP4.
        self.w1 = nn.Parameter(torch.randn(e, inter, lat) * lat**-0.5)
        self.w3 = nn.Parameter(torch.randn(e, inter, lat) * lat**-0.5)
        self.w2 = nn.Parameter(torch.randn(e, lat, inter) * inter**-0.5)
        self.shared_experts = GatedMlp(cfg, cfg.num_shared * inter, out_std)
        self.last_load = None  # tokens per expert in the last forward (for bias balancing)

    def route(self, x, exact):
        """Sigmoid scores; choose top-k on score + bias inside the best groups; weights from the
        un-biased scores, renormalised (spec 4.7)."""
        cfg = self.cfg
        logits = self.gate(x)
        scores = torch.sigmoid(logits)
        sel = (scores + self.e_score_correction_bias).detach()
        if cfg.n_group > 1 and cfg.n_group > cfg.topk_group:
            grouped = sel.view(*sel.shape[:-1], cfg.n_group, -1)
            group_score = grouped.topk(2, dim=-1).values.sum(-1)
            keep = _topk_ids(group_score, cfg.topk_group, exact)
            mask = torch.zeros_like(group_score, dtype=torch.bool).scatter_(-1, keep, True)
            sel = grouped.masked_fill(~mask.unsqueeze(-1), float("-inf")).view_as(sel)
        ids = _topk_ids(sel, cfg.top_k, exact)
        w = scores.gather(-1, ids)
        if cfg.renormalize:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return ids, w * cfg.routed_scale

    def forward(self, x, exact):
        cfg = self.cfg
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        ids, w = self.route(x, exact)
        z = self.routed_expert_down_proj(x)  # once per token, shared by its k experts
        n, k = ids.shape
        # Dispatch: sort the n*k (token, expert) edges by expert and run all experts as one
        # batched product over [experts, capacity, latent] (capacity = the busiest expert's load).
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        expert = flat[order]
        token = order // k
        load = torch.bincount(flat, minlength=cfg.num_experts)
        start = torch.cumsum(load, 0) - load
        slot = torch.arange(n * k) - start[expert]
        capacity = int(load.max())
        buf = z.new_zeros(cfg.num_experts, capacity, z.shape[-1])
        buf = buf.index_put((expert, slot), z[token])
        a = situ(buf @ self.w1.transpose(1, 2), buf @ self.w3.transpose(1, 2), cfg.situ_beta,
                 cfg.situ_linear_beta)
        y = (a @ self.w2.transpose(1, 2))[expert, slot]  # [n*k, latent], edge order = `order`
        weights = w.reshape(-1)[order].unsqueeze(-1)
        combined = z.new_zeros(z.shape).index_add(0, token, y * weights)
        self.last_load = load.to(torch.float32)
        r = rms_norm(combined, self.routed_expert_norm, cfg.rms_eps) if cfg.latent_norm else combined
        out = self.routed_expert_up_proj(r) + self.shared_experts(x)
        return out.view(shape)


def _topk_ids(values, k, exact):
    """Indices of the k largest values; in exact mode ties go to the lower index (engine rule)."""
    if exact:
        return torch.sort(values, dim=-1, descending=True, stable=True).indices[..., :k]
    return values.topk(k, dim=-1).indices


class DecoderLayer(nn.Module):
    def __init__(self, cfg, index):
        super().__init__()
        h = cfg.hidden_size
        out_std = h**-0.5 / math.sqrt(2 * cfg.num_layers)  # small sub-layer outputs at init
        self.input_layernorm = nn.Parameter(torch.ones(h))
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))
        self.attn_res = AttnResQuery(cfg)  # self_attention_res_norm / _proj
        self.mlp_res = AttnResQuery(cfg)  # mlp_res_norm / _proj
        self.is_mla = cfg.is_mla[index]
        self.self_attn = GatedMla(cfg, out_std) if self.is_mla else KimiDeltaAttention(cfg, out_std)
        self.is_moe = index >= cfg.first_dense
        if self.is_moe:
            self.block_sparse_moe = LatentMoe(cfg, out_std)
        else:
            self.mlp = GatedMlp(cfg, cfg.intermediate_size, out_std)


class K3Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.embed_tokens = nn.Parameter(torch.randn(cfg.vocab_size, h))
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(h))
        self.output_attn_res = AttnResQuery(cfg)
        self.lm_head = nn.Parameter(torch.randn(cfg.vocab_size, h) * h**-0.5)

    def forward(self, ids, exact=False):
        """ids [B, T] -> logits [B, T, vocab]. Block Attention Residuals as in spec 4.3."""
        cfg = self.cfg
        partial = F.embedding(ids, self.embed_tokens)
        anchors = []
        for i, layer in enumerate(self.layers):
            attn_in = partial if not anchors else layer.attn_res.mix(anchors + [partial])
            boundary = i % cfg.block_size == 0
            if boundary:  # the finished block becomes an anchor after the attention-side mix
                anchors.append(partial)
            a = layer.self_attn(rms_norm(attn_in, layer.input_layernorm, cfg.rms_eps), exact)
            partial = a if boundary else partial + a
            f_in = layer.mlp_res.mix(anchors + [partial])
            f_in = rms_norm(f_in, layer.post_attention_layernorm, cfg.rms_eps)
            ffn = layer.block_sparse_moe(f_in, exact) if layer.is_moe else layer.mlp(f_in)
            partial = partial + ffn
        tail = self.output_attn_res.mix(anchors + [partial])
        return rms_norm(tail, self.norm, cfg.rms_eps) @ self.lm_head.t()

    def moe_layers(self):
        return [l.block_sparse_moe for l in self.layers if l.is_moe]

    @torch.no_grad()
    def update_router_bias(self, rate):
        """K3/DeepSeek-V3 auxiliary-loss-free balancing: after each step, raise the correction
        bias of under-loaded experts and lower it for over-loaded ones by a fixed rate."""
        for moe in self.moe_layers():
            load = moe.last_load
            moe.e_score_correction_bias += rate * torch.sign(load.mean() - load)
