#!/usr/bin/env python3
"""torch_ops_cuda: PyTorch on the ops, shapes, dtypes and byte counts of bench_cuda_kernels, on the
same GPU in the same command, one JSON object per line (python's json module):
  {"side": "torch", "op": ..., "dtype": ..., "shape": ..., "ms": median, "tflops"|"gbps": ...}
GEMMs as torch.matmul (fp32 with TF32 off: true fp32, as megascale's; bf16 operands, as autocast
runs them), F.layer_norm, F.gelu(approximate="tanh") and its backward, F.cross_entropy forward +
backward, .to(bfloat16), fused AdamW on one tensor of GPT-2 124M's size, the embedding lookup, a
device copy and the 8192^3 bf16 ceiling; attention forward and backward (F.scaled_dot_product_attention
on (B, NH, T, HS) tensors, causal: bf16 on the flash backend, fp32 on the backend torch picks (flash has
no fp32); the sliding window W=256 as a boolean mask, which rules the flash backend out). Timing: CUDA events, 3 warm-ups, median of 20. Random
inputs. Usage: torch_ops_cuda.py [--out FILE]
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

N, C, V, VP = 16384, 768, 50257, 50304


def median_ms(f, warm=3, reps=20):
    for _ in range(warm):
        f()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for _ in range(reps):
        a.record()
        f()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b))
    t.sort()
    return t[len(t) // 2]


def emit(out, op, dtype, shape, ms, flops=0.0, nbytes=0.0):
    j = {"side": "torch", "op": op, "dtype": dtype, "shape": shape, "ms": ms}
    if flops:
        j["tflops"] = flops / (ms * 1e-3) / 1e12
    if nbytes:
        j["gbps"] = nbytes / (ms * 1e-3) / 1e9
    print(json.dumps(j), file=out, flush=True)


def dims(a, b, c):
    return f"{a}x{b}x{c}"


def bench_gemms(out):
    dev = "cuda"
    for c, oc in [(768, 2304), (768, 768), (768, 3072), (3072, 768), (768, 50304)]:
        flops, sh = 2.0 * N * c * oc, dims(N, c, oc)
        x, w = torch.randn(N, c, device=dev), torch.randn(oc, c, device=dev) * 0.05
        emit(out, "gemm_fwd", "fp32", sh, median_ms(lambda: torch.matmul(x, w.t())), flops)
        xb, wb = x.bfloat16(), w.bfloat16()
        db = torch.randn(N, oc, device=dev).bfloat16()
        emit(out, "gemm_fwd", "bf16", sh, median_ms(lambda: torch.matmul(xb, wb.t())), flops)
        emit(out, "gemm_bwd_dinp", "bf16", sh, median_ms(lambda: torch.matmul(db, wb)), flops)
        emit(out, "gemm_bwd_dweight", "bf16", sh, median_ms(lambda: torch.matmul(db.t(), xb)), flops)
        del x, w, xb, wb, db
    s = 8192
    a, b = torch.randn(s, s, device=dev).bfloat16(), torch.randn(s, s, device=dev).bfloat16()
    emit(out, "gemm_ceiling", "bf16", dims(s, s, s), median_ms(lambda: torch.matmul(a, b)), 2.0 * s ** 3)


def bench_elementwise(out):
    dev = "cuda"
    n = 1 << 28
    a, b = torch.rand(n, device=dev), torch.empty(n, device=dev)
    emit(out, "copy", "fp32", str(n), median_ms(lambda: b.copy_(a)), nbytes=2.0 * n * 4)
    del a, b
    nc, n4c = N * C, N * 4 * C
    x, w, bias = torch.randn(N, C, device=dev) * 2, torch.randn(C, device=dev), torch.randn(C, device=dev)
    emit(out, "layernorm_fwd", "fp32", dims(N, C, 1), median_ms(lambda: F.layer_norm(x, (C,), w, bias, 1e-5)),
         nbytes=2.0 * nc * 4)
    pre, dout = torch.randn(N, 4 * C, device=dev) * 2, torch.randn(N, 4 * C, device=dev)
    sh = dims(N, 4 * C, 1)
    emit(out, "gelu_fwd", "fp32", sh, median_ms(lambda: F.gelu(pre, approximate="tanh")), nbytes=2.0 * n4c * 4)
    emit(out, "gelu_bwd", "fp32", sh,
         median_ms(lambda: torch.ops.aten.gelu_backward(dout, pre, approximate="tanh")), nbytes=3.0 * n4c * 4)
    emit(out, "convert_f32_bf16", "bf16", str(n4c), median_ms(lambda: pre.to(torch.bfloat16)), nbytes=6.0 * n4c)
    del pre, dout
    logits = (torch.randn(N, VP, device=dev) * 3).requires_grad_(True)
    t = torch.randint(0, V, (N,), device=dev)

    def ce():
        logits.grad = None
        F.cross_entropy(logits[:, :V], t).backward()
    emit(out, "cross_entropy_fwd_bwd", "fp32", dims(N, VP, 1), median_ms(ce), nbytes=2.0 * N * VP * 4)
    del logits
    npar = 124439808
    p = torch.nn.Parameter(torch.randn(npar, device=dev))
    p.grad = torch.randn(npar, device=dev) * 0.1
    opt = torch.optim.AdamW([p], lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    emit(out, "adamw", "fp32", str(npar), median_ms(opt.step), nbytes=28.0 * npar)
    del p, opt
    wte, wpe = torch.randn(VP, C, device=dev), torch.randn(1024, C, device=dev)
    ids = torch.randint(0, V, (16, 1024), device=dev)
    pos = torch.arange(1024, device=dev)
    emit(out, "embedding_fwd", "fp32", dims(16, 1024, C), median_ms(lambda: F.embedding(ids, wte) + F.embedding(pos, wpe)),
         nbytes=3.0 * nc * 4)


def bench_attention(out):
    dev = "cuda"
    b, t, nh, hs = 16, 1024, 12, 64
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for w in (0, 256):
        pairs = sum(min(i + 1, w) if w else i + 1 for i in range(t))
        fwd_flops = 4.0 * hs * pairs * b * nh
        sh = dims(b, t, nh * hs) + (f"w{w}" if w else "")
        mask = None
        if w:
            i = torch.arange(t, device=dev)
            mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - w)
        for dt, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            q, k, v = (torch.randn(b, nh, t, hs, device=dev, dtype=dt).requires_grad_(True) for _ in range(3))
            do = torch.randn(b, nh, t, hs, device=dev, dtype=dt)
            backends = [SDPBackend.FLASH_ATTENTION] if (dt == torch.bfloat16 and not w) else \
                [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
            try:
                with sdpa_kernel(backends):
                    f = (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)) if mask is None else \
                        (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
                    with torch.no_grad():
                        emit(out, "attn_fwd", name, sh, median_ms(f), fwd_flops)
                    o = f()
                    emit(out, "attn_bwd", name, sh,
                         median_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)), 2.5 * fwd_flops)
            except RuntimeError as e:
                print(f"torch_ops_cuda: attention {name} {sh}: {e}", file=sys.stderr)
            del q, k, v, do


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    out = sys.stdout if args.out == "-" else open(args.out, "w")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    p = torch.cuda.get_device_properties(0)
    print(json.dumps({"side": "torch", "op": "device", "name": p.name, "sms": p.multi_processor_count,
                      "torch": torch.__version__, "cuda": torch.version.cuda}), file=out, flush=True)
    with torch.no_grad():
        bench_gemms(out)
    bench_elementwise(out)
    bench_attention(out)


if __name__ == "__main__":
    main()
