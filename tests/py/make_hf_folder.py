#!/usr/bin/env python3
"""Writes a Hugging Face model folder the way transformers' save_pretrained lays it out, with
weights drawn by PyTorch, independently from megascale's code: config.json and model.safetensors,
or shards model-0000k-of-0000n.safetensors with model.safetensors.index.json.

Usage: make_hf_folder.py KIND DTYPE SHARDS OUT_DIR SHAPE_JSON
  KIND   llama | mistral | qwen2 | gpt2 | gpt2-hub (GPT-2 with GPT2Model's names, no "transformer."
         prefix, plus the attn.bias / attn.masked_bias buffers old checkpoints carry)
  DTYPE  F32 | F16 | BF16
  SHAPE_JSON {"vocab": V, "hidden": C, "layers": L, "heads": NH, "kv_heads": NKV, "ffn": F,
              "positions": P, "tied": bool, "theta": float, "window": W (mistral)}
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stio  # noqa: E402


def llama_tensors(s, kind, g):
    C, V, L, F = s["hidden"], s["vocab"], s["layers"], s["ffn"]
    hs = C // s["heads"]
    q, kv = s["heads"] * hs, s["kv_heads"] * hs

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.05).float().numpy()

    t = {"model.embed_tokens.weight": w(V, C), "model.norm.weight": 1 + w(C)}
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = 1 + w(C)
        t[p + "post_attention_layernorm.weight"] = 1 + w(C)
        t[p + "self_attn.q_proj.weight"] = w(q, C)
        t[p + "self_attn.k_proj.weight"] = w(kv, C)
        t[p + "self_attn.v_proj.weight"] = w(kv, C)
        t[p + "self_attn.o_proj.weight"] = w(C, q)
        if kind == "qwen2":
            t[p + "self_attn.q_proj.bias"] = w(q)
            t[p + "self_attn.k_proj.bias"] = w(kv)
            t[p + "self_attn.v_proj.bias"] = w(kv)
        t[p + "mlp.gate_proj.weight"] = w(F, C)
        t[p + "mlp.up_proj.weight"] = w(F, C)
        t[p + "mlp.down_proj.weight"] = w(C, F)
    if not s["tied"]:
        t["lm_head.weight"] = w(V, C)
    arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}[kind]
    cfg = {"architectures": [arch], "model_type": kind, "vocab_size": V, "hidden_size": C,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": s["heads"],
           "num_key_value_heads": s["kv_heads"], "max_position_embeddings": s["positions"],
           "rms_norm_eps": 1e-5, "rope_theta": s["theta"], "rope_scaling": None, "hidden_act": "silu",
           "tie_word_embeddings": s["tied"], "attention_dropout": 0.0, "torch_dtype": "float32"}
    if kind == "llama":
        cfg.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1, "head_dim": hs})
    if kind == "mistral":
        cfg["sliding_window"] = s["window"]
    if kind == "qwen2":
        cfg.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": L})
    return t, cfg


def gpt2_tensors(s, hub, g):
    C, V, L, T = s["hidden"], s["vocab"], s["layers"], s["positions"]

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.05).float().numpy()

    pre = "" if hub else "transformer."
    t = {pre + "wte.weight": w(V, C), pre + "wpe.weight": w(T, C),
         pre + "ln_f.weight": 1 + w(C), pre + "ln_f.bias": w(C)}
    for l in range(L):
        p = f"{pre}h.{l}."
        t[p + "ln_1.weight"] = 1 + w(C)
        t[p + "ln_1.bias"] = w(C)
        t[p + "ln_2.weight"] = 1 + w(C)
        t[p + "ln_2.bias"] = w(C)
        t[p + "attn.c_attn.weight"] = w(C, 3 * C)  # Conv1D: (in, out)
        t[p + "attn.c_attn.bias"] = w(3 * C)
        t[p + "attn.c_proj.weight"] = w(C, C)
        t[p + "attn.c_proj.bias"] = w(C)
        t[p + "mlp.c_fc.weight"] = w(C, 4 * C)
        t[p + "mlp.c_fc.bias"] = w(4 * C)
        t[p + "mlp.c_proj.weight"] = w(4 * C, C)
        t[p + "mlp.c_proj.bias"] = w(C)
        if hub:  # the causal-mask buffers older checkpoints carry
            t[p + "attn.bias"] = np.tril(np.ones((T, T), dtype=np.float32)).reshape(1, 1, T, T)
            t[p + "attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_embd": C,
           "n_layer": L, "n_head": s["heads"], "n_positions": T, "n_ctx": T, "activation_function": "gelu_new",
           "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "n_inner": None}
    return t, cfg


def main():
    kind, dtype, shards, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    shape = json.loads(sys.argv[5])
    g = torch.Generator().manual_seed(1234)
    if kind.startswith("gpt2"):
        tensors, cfg = gpt2_tensors(shape, kind == "gpt2-hub", g)
    else:
        tensors, cfg = llama_tensors(shape, kind, g)
    if dtype == "F16":
        tensors = {k: v.astype(np.float16) for k, v in tensors.items()}
    cfg["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
    os.makedirs(out, exist_ok=True)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    bf16 = dtype == "BF16"
    if shards == 1:
        stio.save(os.path.join(out, "model.safetensors"), tensors, bf16=bf16)
        return
    names = sorted(tensors)
    weight_map = {}
    for k in range(shards):
        part = {n: tensors[n] for n in names[k::shards]}
        f = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        stio.save(os.path.join(out, f), part, bf16=bf16)
        weight_map.update({n: f for n in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
