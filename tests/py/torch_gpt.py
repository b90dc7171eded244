#!/usr/bin/env python3
"""PyTorch reference of megascale's GPT, written independently from the C++ code.

Loads a Hugging Face GPT-2 style folder exported by megascale (model.safetensors + config.json,
Conv1D (in, out) weight layout, tied LM head), runs it in float64 with autograd, and writes:
  logits (B,T,V), loss [1], grad.<hf name> for every parameter (HF layout) for batch 0,
  and losses [S]: the losses of S AdamW steps (torch.optim.AdamW + clip_grad_norm_) over batches 0..S-1.
Usage: torch_gpt.py MODEL_DIR BATCH.safetensors HYPER.json OUT.safetensors
       torch_gpt.py --loss MODEL_DIR BATCH.safetensors OUT.safetensors
         (the loss of batch 0 and every tensor as loaded, w.<name>, F32)
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


class GPT(NamedParams):
    def __init__(self, cfg, weights):
        super().__init__(weights)
        self.cfg = cfg

    def layer_window(self, l):
        c = self.cfg
        if c.get("megascale_attention", "full") != "sliding":
            return 0
        k = c.get("megascale_full_every", 0)
        if k > 0 and (l + 1) % k == 0:
            return 0
        return c["megascale_window"]

    def attention(self, x, l):
        B, T, C = x.shape
        nh = self.cfg["n_head"]
        hs = C // nh
        pre = f"transformer.h.{l}.attn."
        qkv = x @ self.w(pre + "c_attn.weight") + self.w(pre + "c_attn.bias")
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        i = torch.arange(T).view(T, 1)
        j = torch.arange(T).view(1, T)
        allowed = j <= i
        W = self.layer_window(l)
        if W > 0:
            allowed = allowed & (j > i - W)
        att = att.masked_fill(~allowed, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return y @ self.w(pre + "c_proj.weight") + self.w(pre + "c_proj.bias")

    def mlp(self, x, l):
        pre = f"transformer.h.{l}.mlp."
        h = x @ self.w(pre + "c_fc.weight") + self.w(pre + "c_fc.bias")
        h = torch.nn.functional.gelu(h, approximate="tanh")
        return h @ self.w(pre + "c_proj.weight") + self.w(pre + "c_proj.bias")

    def ln(self, x, name):
        C = x.shape[-1]
        return torch.nn.functional.layer_norm(x, (C,), self.w(name + ".weight"), self.w(name + ".bias"), 1e-5)

    def forward(self, idx):
        B, T = idx.shape
        x = self.w("transformer.wte.weight")[idx] + self.w("transformer.wpe.weight")[:T]
        parallel = self.cfg.get("megascale_block", "sequential") == "parallel"
        for l in range(self.cfg["n_layer"]):
            h = self.ln(x, f"transformer.h.{l}.ln_1")
            if parallel:
                x = x + self.attention(h, l) + self.mlp(h, l)
            else:
                x = x + self.attention(h, l)
                x = x + self.mlp(self.ln(x, f"transformer.h.{l}.ln_2"), l)
        x = self.ln(x, "transformer.ln_f")
        return x @ self.w("transformer.wte.weight").t()


def loss_only(model_dir, batch_path, out_path):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    weights = stio.load_folder(model_dir)
    batch = stio.load(batch_path)
    model = GPT(cfg, weights)
    logits = model(torch.tensor(batch["inputs"][0], dtype=torch.long))
    V = cfg["vocab_size"]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.tensor(batch["targets"][0]).long().reshape(-1))
    out = {"loss": np.array([loss.item()])}
    out.update({"w." + k: v for k, v in weights.items()})
    stio.save(out_path, out)


def main():
    torch.set_num_threads(1)
    if sys.argv[1] == "--loss":
        loss_only(*sys.argv[2:5])
        return
    model_dir, batch_path, hyper_path, out_path = sys.argv[1:5]
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    weights = stio.load(os.path.join(model_dir, "model.safetensors"))
    hyper = json.load(open(hyper_path))
    batch = stio.load(batch_path)
    inputs = torch.tensor(batch["inputs"], dtype=torch.long)    # (S, B, T)
    targets = torch.tensor(batch["targets"], dtype=torch.long)  # (S, B, T)
    model = GPT(cfg, weights)
    V = cfg["vocab_size"]
    out = {}

    logits = model(inputs[0])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets[0].reshape(-1))
    loss.backward()
    out["logits"] = logits.detach().numpy()
    out["loss"] = np.array([loss.item()])
    out.update(model.grads())

    # AdamW steps: decay on 2-D matrix weights only (not embeddings, LayerNorm, biases).
    def decays(name):
        return name.endswith(".weight") and weights[name].ndim == 2 and "wte" not in name and "wpe" not in name

    def loss_of(s):
        return torch.nn.functional.cross_entropy(model(inputs[s]).reshape(-1, V), targets[s].reshape(-1))

    out["losses"] = adamw_losses(model, decays, loss_of, inputs.shape[0], hyper)
    stio.save(out_path, out)


if __name__ == "__main__":
    main()
