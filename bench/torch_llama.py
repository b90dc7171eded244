#!/usr/bin/env python3
"""PyTorch CPU training-speed baseline of a Llama-style decoder for bench/bench_llama.sh.

The same model as megascale's llama preset, as a plain nn.Module: pre-norm sequential blocks, RMSNorm
(eps 1e-5), rotary embeddings on q and k (rotate_half, theta 10000), grouped-query attention
(--n-kv-head key/value heads, each serving n_head / n_kv_head query heads; repeat_interleave before
an explicit causal masked softmax: torch 1.13 has no F.scaled_dot_product_attention), SwiGLU MLP
(--ffn hidden), no biases, an untied LM head; AdamW (decay on matrix weights but the embedding) with
global-norm clipping at 1.0, as megascale's defaults.

Trains on random tokens; after --warmup steps times --steps steps and prints one JSON line in
bench/torch_gpt.py's format: median tokens/s, median step ms, CPU seconds per step, peak RSS MB,
FLOPs per token (megascale's model_flops_per_token: q, k, v, o, gate, up, down and the LM head, 3x the
forward; attention over the keys attended), precision. bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
around forward + loss. Run with /usr/bin/python3 (Debian's python3-torch).
"""
import argparse
import json
import math
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Block(nn.Module):
    def __init__(self, C, nh, nkv, ffn, mask):
        super().__init__()
        self.nh, self.nkv, self.hs = nh, nkv, C // nh
        self.input_layernorm = RMSNorm(C)
        self.post_attention_layernorm = RMSNorm(C)
        self.q_proj = nn.Linear(C, nh * self.hs, bias=False)
        self.k_proj = nn.Linear(C, nkv * self.hs, bias=False)
        self.v_proj = nn.Linear(C, nkv * self.hs, bias=False)
        self.o_proj = nn.Linear(nh * self.hs, C, bias=False)
        self.gate_proj = nn.Linear(C, ffn, bias=False)
        self.up_proj = nn.Linear(C, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, C, bias=False)
        self.register_buffer("mask", mask, persistent=False)

    def attn(self, x, cos, sin):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        att = F.softmax(att.masked_fill(self.mask[:T, :T], float("-inf")), dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x, cos, sin):
        x = x + self.attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, T = a.n_embd, a.seq_len
        self.embed_tokens = nn.Embedding(a.vocab_size, C)
        i = torch.arange(T).view(T, 1)
        mask = ~(torch.arange(T).view(1, T) <= i)
        self.layers = nn.ModuleList(Block(C, a.n_head, a.n_kv_head, a.ffn, mask) for _ in range(a.n_layer))
        self.norm = RMSNorm(C)
        self.lm_head = nn.Linear(C, a.vocab_size, bias=False)
        hs = C // a.n_head
        inv = 1.0 / (10000.0 ** (torch.arange(0, hs, 2).float() / hs))
        freqs = torch.arange(T).float().view(T, 1) * inv.view(1, -1)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * a.n_layer) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for blk in self.layers:
            x = blk(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def flops_per_token(a):
    C, T, hs = a.n_embd, a.seq_len, a.n_embd // a.n_head
    qkv = (a.n_head + 2 * a.n_kv_head) * hs
    fwd = 0.0
    for _ in range(a.n_layer):
        fwd += 2.0 * (qkv * C + C * C + 2 * a.ffn * C + a.ffn * C)
        fwd += 2.0 * 2.0 * C * sum(t + 1 for t in range(T)) / T
    fwd += 2.0 * C * a.vocab_size
    return 3.0 * fwd


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--n-kv-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--vocab-size", type=int, default=50257)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=1337)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Llama(a)
    decay = [q for n, q in model.named_parameters() if q.dim() == 2 and not n.startswith("embed_tokens")]
    no_decay = [q for n, q in model.named_parameters() if not (q.dim() == 2 and not n.startswith("embed_tokens"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    B, T = a.batch_size, a.seq_len
    gen = torch.Generator().manual_seed(a.seed + 1)

    def step():
        idx = torch.randint(0, a.vocab_size, (B, T), generator=gen)
        tgt = torch.randint(0, a.vocab_size, (B, T), generator=gen)
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        if a.precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(idx, tgt)
        else:
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return time.perf_counter() - t0, time.process_time() - c0, loss.item()

    for _ in range(a.warmup):
        step()
    times, cpu, loss = [], [], 0.0
    for _ in range(a.steps):
        dt, dc, loss = step()
        times.append(dt)
        cpu.append(dc)
    med = statistics.median(times)
    print(json.dumps({
        "engine": "pytorch", "torch": torch.__version__, "precision": a.precision, "threads": torch.get_num_threads(),
        "B": B, "T": T, "n_layer": a.n_layer, "n_embd": a.n_embd, "n_head": a.n_head, "n_kv_head": a.n_kv_head,
        "ffn": a.ffn, "vocab_size": a.vocab_size, "params": sum(q.numel() for q in model.parameters()),
        "warmup": a.warmup, "steps": a.steps, "step_ms_median": med * 1e3, "step_ms_all": [t * 1e3 for t in times],
        "tokens_per_s_median": B * T / med, "cpu_s_per_step_median": statistics.median(cpu),
        "tokens_per_cpu_s_median": B * T / statistics.median(cpu),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "flops_per_token": flops_per_token(a), "last_loss": loss}))


if __name__ == "__main__":
    main()
