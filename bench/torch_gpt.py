#!/usr/bin/env python3
"""PyTorch CPU training-speed baseline for megascale's bench (bench/run_bench.sh).

The same model as megascale's GPT, as a plain nn.Module: pre-LN blocks, sequential (GPT-2) or
parallel (x + Attn(LN x) + MLP(LN x), one shared LN), causal attention, optionally a sliding window
(token t attends t-W+1..t; with --full-every k every k-th layer is full), GeLU tanh, tied LM head,
AdamW (decay on matrix weights only, like megascale) with global-norm clipping at 1.0.
Attention is an explicit masked softmax: torch 1.13 has no F.scaled_dot_product_attention.

Trains on random tokens; after --warmup steps times --steps steps and prints one JSON line:
median tokens/s, median step ms, CPU seconds per step, peak RSS MB (resource.getrusage), FLOPs/token (the same count as
megascale's GPT::flops_per_token), precision. bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
around forward+loss (fp32 master weights and optimizer, as autocast does).

Run it with /usr/bin/python3 (Debian's python3-torch); its fastest settings here are 2 threads,
OMP_WAIT_POLICY=PASSIVE and ATEN_CPU_CAPABILITY=avx512 in the environment (run_bench.sh sets them).

--device cuda (the GPU baseline of scripts/gpu/check.sh, torch >= 2): the model and the random
tokens on the GPU; attention through F.scaled_dot_product_attention (is_causal for full attention,
pinned to the flash backend when --sdpa flash; a boolean band mask for the sliding window, which
flash does not take); bf16 = torch.autocast("cuda", dtype=torch.bfloat16) with fp32 master weights;
fp32 with TF32 off (megascale's fp32 GEMMs are true fp32); torch.optim.AdamW(fused=True);
--compile 1 wraps the model in torch.compile (default mode; its warm-up is reported apart as
compile_s). Steps are timed between torch.cuda.synchronize() calls; the median is reported.
"""
import argparse
import contextlib
import json
import math
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, nh, parallel, mask, sdpa=False, full=True):
        super().__init__()
        self.nh, self.parallel, self.sdpa, self.full = nh, parallel, sdpa, full
        self.ln_1 = nn.LayerNorm(C)
        self.ln_2 = None if parallel else nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        self.register_buffer("mask", mask, persistent=False)  # (T,T) bool: True = masked out

    def attn(self, x):
        B, T, C = x.shape
        hs = C // self.nh
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.nh, hs).transpose(1, 2)
        k = k.view(B, T, self.nh, hs).transpose(1, 2)
        v = v.view(B, T, self.nh, hs).transpose(1, 2)
        if self.sdpa:  # GPU: fused attention (flash for full causal attention)
            if self.full:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=~self.mask[:T, :T])
            return self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_proj(y)

    def mlp(self, x):
        return self.mlp_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    def forward(self, x):
        h = self.ln_1(x)
        if self.parallel:
            return x + self.attn(h) + self.mlp(h)
        x = x + self.attn(h)
        return x + self.mlp(self.ln_2(x))


def causal_mask(T, W):
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    allowed = j <= i
    if W > 0:
        allowed = allowed & (j > i - W)
    return ~allowed


def layer_window(a, l):
    if a.attention != "sliding":
        return 0
    if a.full_every > 0 and (l + 1) % a.full_every == 0:
        return 0
    return a.window


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        C = a.n_embd
        self.wte = nn.Embedding(a.vocab_size, C)
        self.wpe = nn.Embedding(a.max_seq_len, C)
        masks = {}
        blocks = []
        for l in range(a.n_layer):
            W = layer_window(a, l)
            if W not in masks:
                masks[W] = causal_mask(a.seq_len, W)
            blocks.append(Block(C, a.n_head, a.block == "parallel", masks[W], sdpa=a.device == "cuda", full=W == 0))
        self.h = nn.ModuleList(blocks)
        self.ln_f = nn.LayerNorm(C)
        # GPT-2 init: N(0, 0.02), residual projections 0.02/sqrt(2L), zero biases.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * a.n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def flops_per_token(a):
    """Same count as megascale's GPT::flops_per_token: 3x the forward matmul FLOPs, attention over
    the keys actually attended, LM head with the real vocabulary."""
    C, T = a.n_embd, a.seq_len
    fwd = 0.0
    for l in range(a.n_layer):
        fwd += 2.0 * 12 * C * C
        W = layer_window(a, l)
        keys = sum(min(t + 1, W) if W > 0 else t + 1 for t in range(T))
        fwd += 2.0 * 2.0 * C * keys / T
    fwd += 2.0 * C * a.vocab_size
    return 3.0 * fwd


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--vocab-size", type=int, default=50257)
    p.add_argument("--max-seq-len", type=int, default=1024)
    p.add_argument("--block", choices=["sequential", "parallel"], default="sequential")
    p.add_argument("--attention", choices=["full", "sliding"], default="full")
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--full-every", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--compile", type=int, default=0, help="1: torch.compile(model) (cuda)")
    p.add_argument("--sdpa", choices=["flash", "auto"], default="flash", help="cuda: SDPA backend for full attention")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cuda = a.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = GPT(a).to(a.device)
    run_model = torch.compile(model) if a.compile else model
    decay = [q for n, q in model.named_parameters() if q.dim() == 2 and not n.startswith(("wte", "wpe"))]
    no_decay = [q for n, q in model.named_parameters() if not (q.dim() == 2 and not n.startswith(("wte", "wpe")))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if cuda else {}))
    B, T = a.batch_size, a.seq_len
    gen = torch.Generator().manual_seed(a.seed + 1)

    def sdpa_context():
        if not cuda or a.sdpa != "flash":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])

    def step():
        idx = torch.randint(0, a.vocab_size, (B, T), generator=gen).to(a.device)
        tgt = torch.randint(0, a.vocab_size, (B, T), generator=gen).to(a.device)
        if cuda:
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with sdpa_context():
            if a.precision == "bf16":
                with torch.autocast(a.device, dtype=torch.bfloat16):
                    loss = run_model(idx, tgt)
            else:
                loss = run_model(idx, tgt)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0, time.process_time() - c0, loss.item()

    tc = time.perf_counter()
    for _ in range(a.warmup):
        step()
    compile_s = time.perf_counter() - tc
    times, cpu, loss = [], [], 0.0
    for _ in range(a.steps):
        dt, dc, loss = step()
        times.append(dt)
        cpu.append(dc)
    med = statistics.median(times)
    out = {
        "engine": "pytorch", "torch": torch.__version__, "precision": a.precision,
        "threads": torch.get_num_threads(), "B": B, "T": T, "n_layer": a.n_layer, "n_embd": a.n_embd,
        "vocab_size": a.vocab_size, "block": a.block, "attention": a.attention,
        "window": a.window if a.attention == "sliding" else 0,
        "params": sum(q.numel() for q in model.parameters()),
        "warmup": a.warmup, "steps": a.steps,
        "step_ms_median": med * 1e3, "step_ms_all": [t * 1e3 for t in times],
        "tokens_per_s_median": B * T / med,
        "cpu_s_per_step_median": statistics.median(cpu),
        "tokens_per_cpu_s_median": B * T / statistics.median(cpu),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "flops_per_token": flops_per_token(a), "last_loss": loss,
        "device": a.device, "compile": a.compile, "warmup_s": compile_s,
    }
    if cuda:
        out["gpu"] = torch.cuda.get_device_name(0)
        out["peak_gpu_mem_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(out))


if __name__ == "__main__":
    main()
