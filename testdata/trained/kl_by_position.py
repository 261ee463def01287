#!/usr/bin/env python3
"""KL divergence of the trained qwen35moe's Q4_K tensors, by position in the held-out window.

For each GGUF given (tq's and llama.cpp's turboquant files of testdata/trained/qwen35moe, as
scripts/quality.sh writes them), every Q4_K tensor is decoded into the torch model of train.py
(its rows matched to the checkpoint's, as e2e_rounding.py does); every other weight keeps the
checkpoint's value, so the figures are the 4-bit tensors' share of the file's error, without
llama.cpp's activation rounding. The next-token KL(full precision || quantized) is computed in
float64 on the first --windows held-out windows and printed per range of positions, with each
file's ratio to the last file's (the baseline).

    python3 testdata/trained/kl_by_position.py build/q/qwen35moe/tq-turbo.gguf \
        build/q/qwen35moe/llamacpp-turbomix.gguf

--only and --rows restrict the decoded tensors (for example --only attn_qkv --rows 128:256
for the key rows of every DeltaNet block), to measure one role's share.

Debian's python3-torch (see train.py).
"""
import argparse
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e_rounding as E  # noqa: E402
import train as T  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf", nargs="+", help="GGUF files of the model; the last is the baseline of the ratios")
    ap.add_argument("--model", default=os.path.join(HERE, "qwen35moe"))
    ap.add_argument("--windows", type=int, default=56)
    ap.add_argument("--edges", default="0,8,32,64,128,192,255", help="range boundaries (positions)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="decode only the Q4_K tensors whose GGUF name matches this regex")
    ap.add_argument("--rows", default="", help="LO:HI: of each attn_qkv tensor decode only GGUF rows LO..HI-1 "
                    "(the DeltaNet's query and key rows are 0:2*KeyDim, the value rows the rest)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    model = T.Model("qwen35moe")
    model.load_hf(T.load_safetensors(a.model + "/model.safetensors"))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    orig = {n: p.detach().clone() for n, p in model.named_parameters()}
    wins = T.heldout_windows(a.windows)
    targets = E.hf_targets(model)

    def logp():
        with torch.no_grad():
            return torch.cat([torch.log_softmax(model(wins[i:i + 8, :-1]).double(), -1)
                              for i in range(0, len(wins), 8)])

    def install(path):
        for n, p in model.named_parameters():
            p.data.copy_(orig[n])
        buf, ts = E.read_gguf(path)
        for name, off, S, M, codes, view, perm, inv in E.q4k_tensors(path, buf, ts, targets):
            if a.only and not re.search(a.only, name):
                continue
            rows, cols = S.shape
            D = S * codes - M
            if a.rows and "attn_qkv" in name:
                lo, hi = (int(v) for v in a.rows.split(":"))
                full = view.reshape(rows, cols).clone()
                full[perm[lo:hi]] = D[lo:hi]
                view.copy_(full.view(view.shape))
            else:
                view.copy_(D[inv].view(view.shape))

    ref = logp()
    kls = []
    for path in a.gguf:
        install(path)
        kl = (ref.exp() * (ref - logp())).sum(-1)  # [window, position]
        kls.append(kl)
        print(f"{path}: mean KL {kl.mean().item():.6f} over {kl.numel()} positions", flush=True)
    edges = [int(x) for x in a.edges.split(",")]
    print("positions  " + "  ".join(f"{os.path.basename(p):>24s}" for p in a.gguf))
    for lo, hi in zip(edges[:-1], edges[1:]):
        ms = [kl[:, lo:hi].mean().item() for kl in kls]
        cells = [f"{m:.5f} ({m / ms[-1]:.3f}x)" for m in ms]
        print(f"{lo:3d}-{hi - 1:3d}    " + "  ".join(f"{c:>24s}" for c in cells))


if __name__ == "__main__":
    main()
