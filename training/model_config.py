"""config.json of the demo model: K3's field set and flags with small dimensions.

Structure kept from K3 (K3 model specification §1): KDA/MLA schedule "layer i is MLA iff (i+1) % 4 == 0 or
it is the last" (9 layers: KDA 1,2,3,5,6,7 / MLA 4,8,9, so the model ends on two MLA layers like
K3's 92/93), a dense layer 0, LatentMoE everywhere else with 2 shared experts, AttnRes blocks of
4 layers (K3: 12 of 93), KDA head_dim 128, sigmoid/noaux_tc routing with K3's 1/1 groups, SiTU
4/25, MXFP4 quantization_config. Special ids follow K3's offsets from the first special id.
"""

import copy

DIMS = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 9,
    "attn_res_block_size": 4,
    "num_attention_heads": 2,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "kda_heads": 1,
    "num_experts": 32,
    "num_experts_per_token": 4,
    "moe_intermediate_size": 64,
    "routed_expert_hidden_size": 64,
    "max_position_embeddings": 4096,
}


def quantization_config():
    return {
        "quant_method": "compressed-tensors",
        "format": "mxfp4-pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {
            "format": "mxfp4-pack-quantized",
            "targets": ["re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$"],
            "weights": {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "group",
                        "group_size": 32, "dynamic": False, "observer": "minmax",
                        "scale_dtype": "torch.uint8"},
            "input_activations": None,
            "output_activations": None}},
        "ignore": [],
    }


def demo_config(num_ranks, dims=None):
    d = dict(DIMS, **(dims or {}))
    vocab = num_ranks + 256
    first_special = num_ranks
    bos, eos, pad, media = first_special, first_special + 2, first_special + 255, first_special + 21
    layers = d["num_hidden_layers"]
    mla = [i + 1 for i in range(layers) if (i + 1) % 4 == 0 or i == layers - 1]
    kda = [i + 1 for i in range(layers) if i + 1 not in mla]
    text = {
        "model_type": "kimi_linear",
        "architectures": ["KimiLinearForCausalLM"],
        "dtype": "bfloat16",
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": vocab,
        "hidden_size": d["hidden_size"],
        "intermediate_size": d["intermediate_size"],
        "num_hidden_layers": layers,
        "max_position_embeddings": d["max_position_embeddings"],
        "rms_norm_eps": 1e-05,
        "hidden_act": "situ",
        "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0,
        "num_nextn_predict_layers": 0,
        "attn_res_block_size": d["attn_res_block_size"],
        "num_attention_heads": d["num_attention_heads"],
        "num_key_value_heads": d["num_attention_heads"],
        "q_lora_rank": d["q_lora_rank"],
        "kv_lora_rank": d["kv_lora_rank"],
        "qk_nope_head_dim": d["qk_nope_head_dim"],
        "qk_rope_head_dim": d["qk_rope_head_dim"],
        "v_head_dim": d["v_head_dim"],
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "linear_attn_config": {
            "head_dim": 128,
            "num_heads": d["kda_heads"],
            "short_conv_kernel_size": 4,
            "kda_layers": kda,
            "full_attn_layers": mla,
            "use_full_rank_gate": True,
            "gate_lower_bound": -5.0,
        },
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_experts": d["num_experts"],
        "num_experts_per_token": d["num_experts_per_token"],
        "num_shared_experts": 2,
        "moe_intermediate_size": d["moe_intermediate_size"],
        "routed_expert_hidden_size": d["routed_expert_hidden_size"],
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "topk_method": "noaux_tc",
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
        "moe_renormalize": True,
        "routed_scaling_factor": 1.0,
        "quantization_config": quantization_config(),
    }
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "dtype": "bfloat16",
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "media_placeholder_token_id": media,
        "tie_word_embeddings": False,
        "text_config": copy.deepcopy(text),
        "vision_config": {"model_type": "kimi_k3_vision",
                          "note": "text-only demo model: no vision tensors"},
    }
