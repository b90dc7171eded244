#!/usr/bin/env python3
"""PyTorch reference of a Llama-style decoder, written from the published architecture (Llama 2/3,
Mistral, Qwen2 as Hugging Face transformers defines them), independently from megascale's C++ code.

The model reads a Hugging Face folder with Llama names (model.embed_tokens, model.layers.<l>.
{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj},
model.norm, lm_head) and config.json (hidden_size, num_attention_heads, num_key_value_heads,
intermediate_size, rms_norm_eps, rope_theta, tie_word_embeddings, attention_bias/mlp_bias, Qwen2's
q/k/v biases, Mistral's sliding_window) plus the megascale_* fields of MegascaleForCausalLM folders
(norm, positions, mlp, bias, block, attention, window, full_every), and computes in float64:
  - RMSNorm: x / sqrt(mean(x^2) + eps) * w (LayerNorm with a bias when megascale_norm = layernorm);
  - RoPE with rotate_half: q*cos + rotate_half(q)*sin, angles t * theta^(-2i/hs), i < hs/2, the
    cos/sin of a position duplicated over both halves of the head (learned positions when
    megascale_positions = learned);
  - grouped-query attention: key/value head g serves query heads g*r .. g*r+r-1 (r = heads / kv
    heads), as transformers' repeat_kv; causal, optionally a window of W keys (t-W+1..t);
  - SwiGLU: down(silu(gate x) * up x) (tanh GeLU when megascale_mlp = gelu);
  - sequential block x + attn(norm1 x), then + mlp(norm2 .), or parallel x + attn(n x) + mlp(n x).

Modes:
  ref  MODEL_DIR BATCH HYPER OUT: logits (B,T,V), loss, grad.<name> of every tensor for batch 0, and
       the losses of S AdamW steps (torch.optim.AdamW + clip_grad_norm_) over batches 0..S-1.
  loss MODEL_DIR BATCH OUT:       the loss of batch 0 and every tensor of the folder as loaded (F32).
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stio  # noqa: E402
from reftrain import NamedParams, adamw_losses  # noqa: E402

torch.set_default_dtype(torch.float64)


class Llama(NamedParams):
    def __init__(self, cfg, weights):
        super().__init__(weights)
        self.cfg = cfg
        self.C = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads", self.nh)
        self.hs = self.C // self.nh
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        arch = cfg["architectures"][0]
        self.norm_kind = cfg.get("megascale_norm", "rmsnorm")
        self.positions = cfg.get("megascale_positions", "rope")
        self.mlp_kind = cfg.get("megascale_mlp", "swiglu")
        self.parallel = cfg.get("megascale_block", "sequential") == "parallel"
        self.attention_kind = cfg.get("megascale_attention", "full")
        self.window = cfg.get("megascale_window", 0)
        self.full_every = cfg.get("megascale_full_every", 0)
        if arch == "MistralForCausalLM" and cfg.get("sliding_window"):
            self.attention_kind, self.window = "sliding", cfg["sliding_window"]

    def linear(self, x, name):
        y = x @ self.w(name + ".weight").t()
        if self.has(name + ".bias"):
            y = y + self.w(name + ".bias")
        return y

    def norm(self, x, name):
        w = self.w(name + ".weight")
        if self.norm_kind == "layernorm":
            return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, self.w(name + ".bias"), self.eps)
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x):  # x (B, heads, T, hs)
        T, hs = x.shape[2], x.shape[3]
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
        freqs = torch.arange(T, dtype=torch.float64).view(T, 1) * inv_freq.view(1, -1)
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        half = hs // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def layer_window(self, l):
        if self.attention_kind != "sliding":
            return 0
        if self.full_every > 0 and (l + 1) % self.full_every == 0:
            return 0
        return self.window

    def attention(self, x, l):
        B, T, _ = x.shape
        pre = f"model.layers.{l}.self_attn."
        q = self.linear(x, pre + "q_proj").view(B, T, self.nh, self.hs).transpose(1, 2)
        k = self.linear(x, pre + "k_proj").view(B, T, self.nkv, self.hs).transpose(1, 2)
        v = self.linear(x, pre + "v_proj").view(B, T, self.nkv, self.hs).transpose(1, 2)
        if self.positions == "rope":
            q, k = self.rope(q), self.rope(k)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hs)
        i = torch.arange(T).view(T, 1)
        j = torch.arange(T).view(1, T)
        allowed = j <= i
        W = self.layer_window(l)
        if W > 0:
            allowed = allowed & (j > i - W)
        att = torch.softmax(att.masked_fill(~allowed, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, self.nh * self.hs)
        return self.linear(y, pre + "o_proj")

    def mlp(self, x, l):
        pre = f"model.layers.{l}.mlp."
        if self.mlp_kind == "gelu":
            h = torch.nn.functional.gelu(self.linear(x, pre + "up_proj"), approximate="tanh")
        else:
            h = torch.nn.functional.silu(self.linear(x, pre + "gate_proj")) * self.linear(x, pre + "up_proj")
        return self.linear(h, pre + "down_proj")

    def forward(self, idx):
        B, T = idx.shape
        x = self.w("model.embed_tokens.weight")[idx]
        if self.positions == "learned":
            x = x + self.w("model.embed_positions.weight")[:T]
        for l in range(self.cfg["num_hidden_layers"]):
            h = self.norm(x, f"model.layers.{l}.input_layernorm")
            if self.parallel:
                x = x + self.attention(h, l) + self.mlp(h, l)
            else:
                x = x + self.attention(h, l)
                x = x + self.mlp(self.norm(x, f"model.layers.{l}.post_attention_layernorm"), l)
        x = self.norm(x, "model.norm")
        head = "model.embed_tokens.weight" if self.cfg.get("tie_word_embeddings", False) else "lm_head.weight"
        return x @ self.w(head).t()


def ce(logits, targets, V):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1)


def main():
    mode = sys.argv[1]
    torch.set_num_threads(1)
    model_dir = sys.argv[2]
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    weights = stio.load_folder(model_dir)
    batch = stio.load(sys.argv[3])
    inputs = torch.tensor(batch["inputs"], dtype=torch.long)    # (S, B, T)
    targets = torch.tensor(batch["targets"], dtype=torch.long)  # (S, B, T)
    model = Llama(cfg, weights)
    V = cfg["vocab_size"]
    out = {}
    logits = model(inputs[0])
    loss = ce(logits, targets[0], V)
    out["loss"] = np.array([loss.item()])
    if mode == "loss":
        for name, w in weights.items():
            out["w." + name] = w
        stio.save(sys.argv[4], out)
        return
    assert mode == "ref", mode
    hyper = json.load(open(sys.argv[4]))
    loss.backward()
    out["logits"] = logits.detach().numpy()
    out.update(model.grads())
    # AdamW: decay on matrices (lm_head included), not on embeddings, norms or biases (megascale's defaults).
    out["losses"] = adamw_losses(model, lambda name: weights[name].ndim == 2 and "embed_" not in name,
                                 lambda s: ce(model(inputs[s]), targets[s], V), inputs.shape[0], hyper)
    stio.save(sys.argv[5], out)


if __name__ == "__main__":
    main()
