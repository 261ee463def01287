#!/usr/bin/env python3
"""An experiment, not part of tq: does rounding chosen on the model's output carry to held-out
text? (docs/results.md, "2026-12-06: rounding fitted to the output's KL".)

Takes a GGUF that tq wrote for testdata/trained/qwen35moe (e.g. scripts/quality.sh's
tq-turbo.gguf) and moves the codes of its Q4_K tensors to lower the KL divergence of the
model's next-token distributions from the BF16 model's, over the sequences of a calibration
token file (tq tokenize --calibration-out), with every other tensor at full precision. The
parametrisation is AutoRound's (Cheng et al. 2023, "Optimize Weight Rounding via Signed
Gradient Descent"): code = clamp(round(c + V) + D, 0, 15), with c = (w + min)/scale the
original weight's place on its sub-block's grid, V in [-0.5, 0.5] learned by signed gradient
descent through a straight-through rounding, and D the integer offset that makes V = 0 give
the file's own codes. Each Q4_K block keeps its d, dmin and 6-bit scales and mins, so the new
codes are written back into a copy of the file byte for byte in place (qualitybench kld then
measures it with llama.cpp). GGUF rows are matched to the checkpoint's rows by nearest
dequantized row (the value-head axes are reordered by the converter). Every few steps it
prints the KL on (up to --evalseqs of) the calibration sequences and on --heldout windows of
the held-out documents (testdata/trained/data), which nothing here is fitted to.

    python3 testdata/trained/e2e_rounding.py --gguf build/q/qwen35moe/tq-turbo.gguf \
        --tok c.tok --out e2e.gguf --steps 40 --lr 0.005

Needs Debian's python3-torch (as train.py); about 16 s a step for 32 sequences of 256 tokens
on two cores (the Gated DeltaNet runs token by token).
"""
import argparse
import os
import struct
import sys
import time
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train as T


def read_gguf(path):
    data = open(path, "rb").read()
    p = 0

    def rd(fmt):
        nonlocal p
        v = struct.unpack_from("<" + fmt, data, p)
        p += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal p
        n = rd("Q")
        s = data[p:p + n].decode("utf-8", "replace")
        p += n
        return s

    fm = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def val(t):
        if t in fm:
            return rd(fm[t])
        if t == 8:
            return string()
        if t == 9:
            et = rd("I")
            n = rd("Q")
            return [val(et) for _ in range(n)]
        raise ValueError(t)

    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    p = 4
    rd("I")
    nt, nkv = rd("Q"), rd("Q")
    kv = {}
    for _ in range(nkv):
        k = string()
        kv[k] = val(rd("I"))
    ts = {}
    for _ in range(nt):
        name = string()
        nd = rd("I")
        dims = [rd("Q") for _ in range(nd)]
        typ = rd("I")
        off = rd("Q")
        ts[name] = (dims, typ, off)
    al = kv.get("general.alignment", 32)
    start = (p + al - 1) // al * al
    return bytearray(data), {n: (d, t, start + o) for n, (d, t, o) in ts.items()}


Q4K = 12


def q4k_parts(buf, off, rows, cols):
    nb = rows * cols // 256
    raw = torch.frombuffer(buf, dtype=torch.uint8, count=nb * 144, offset=off).view(nb, 144)
    d = raw[:, 0:2].contiguous().view(torch.float16).float().view(nb)
    dmin = raw[:, 2:4].contiguous().view(torch.float16).float().view(nb)
    sc = raw[:, 4:16].long()
    qs = raw[:, 16:144].long()
    scale = torch.empty(nb, 8, dtype=torch.long)
    mins = torch.empty(nb, 8, dtype=torch.long)
    scale[:, 0:4] = sc[:, 0:4] & 63
    mins[:, 0:4] = sc[:, 4:8] & 63
    scale[:, 4:8] = (sc[:, 8:12] & 0xF) | ((sc[:, 0:4] >> 6) << 4)
    mins[:, 4:8] = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    q = qs.view(nb, 4, 32)
    codes = torch.stack([q & 0xF, q >> 4], dim=2).reshape(nb, 256)
    S = (d[:, None] * scale.float()).repeat_interleave(32, 1)
    M = (dmin[:, None] * mins.float()).repeat_interleave(32, 1)
    return S.view(rows, cols), M.view(rows, cols), codes.view(rows, cols)


def q4k_tensors(path, buf, ts, targets):
    """Every Q4_K tensor of a GGUF matched to the torch model's weight: yields (name, off, S, M,
    codes, view, perm, inv), with S, M, codes [rows, cols] in GGUF row order (S·codes − M decodes
    them), view the model's weight in its own shape (the gate or up half of a fused stack, a
    view that writes into the parameter), perm[r] the checkpoint row of GGUF row r and inv its
    inverse."""
    for name, (dims, typ, off) in ts.items():
        if typ != Q4K:
            continue
        cols, rows = dims[0], 1
        for x in dims[1:]:
            rows *= x
        S, M, codes = q4k_parts(buf, off, rows, cols)
        tgt = targets[name]
        view = getattr(tgt[0], tgt[1]).detach()
        if len(tgt) == 3:
            ff = view.shape[1] // 2
            view = view[:, :ff] if tgt[2] == 0 else view[:, ff:]
        perm = torch.cdist(S * codes - M, view.reshape(rows, cols)).argmin(1)  # GGUF row r is HF row perm[r]
        if torch.unique(perm).numel() != rows:
            raise ValueError(f"{path}: {name}: its rows do not match the checkpoint's one to one")
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(rows)
        yield name, off, S, M, codes, view, perm, inv


def q4k_write(buf, off, codes):
    nb = codes.numel() // 256
    q = codes.reshape(nb, 4, 2, 32).to(torch.uint8)
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(nb, 128)
    raw = torch.frombuffer(buf, dtype=torch.uint8, count=nb * 144, offset=off).view(nb, 144)
    raw[:, 16:144] = qs


def read_tok(path):
    b = open(path, "rb").read()
    if b[:6] != b"TQTOK\0":
        raise ValueError(f"{path}: not a tq token file")
    count = struct.unpack_from("<I", b, 10)[0]
    p = 58
    seqs = []
    for _ in range(count):
        t, a = struct.unpack_from("<II", b, p)
        p += 8
        ids = list(struct.unpack_from("<%di" % t, b, p))
        p += 4 * t
        seqs.append((ids, a))
    return seqs


def hf_targets(model):
    """GGUF name -> (module, attribute[, half of the fused gate_up stack]) holding that weight."""
    out = {}
    for i, l in enumerate(model.layers):
        a, m = l.attn, l.mlp
        b = f"blk.{i}."
        if isinstance(a, T.GatedDeltaNet):
            out[b + "attn_qkv.weight"] = (a.in_proj_qkv, "weight")
            out[b + "attn_gate.weight"] = (a.in_proj_z, "weight")
        else:
            out[b + "attn_q.weight"] = (a.q_proj, "weight")
            out[b + "attn_k.weight"] = (a.k_proj, "weight")
            out[b + "attn_v.weight"] = (a.v_proj, "weight")
        out[b + "ffn_gate_exps.weight"] = (m, "gate_up", 0)
        out[b + "ffn_up_exps.weight"] = (m, "gate_up", 1)
        out[b + "ffn_gate_shexp.weight"] = (m.shared.gate_proj, "weight")
        out[b + "ffn_up_shexp.weight"] = (m.shared.up_proj, "weight")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "qwen35moe"))
    ap.add_argument("--gguf", required=True, help="tq's GGUF of the model (its Q4_K tensors are moved)")
    ap.add_argument("--tok", required=True, help="calibration token file (tq tokenize --calibration-out)")
    ap.add_argument("--out", required=True, help="the copy with the new codes (the state of lowest calibration KL)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.005, help="signed step of V, decayed linearly to 0")
    ap.add_argument("--batch", type=int, default=32, help="sequences per step (random when fewer than the file's)")
    ap.add_argument("--only", default="", help="comma-separated substrings of the tensor names to move (default all)")
    ap.add_argument("--every", type=int, default=5, help="steps between evaluations")
    ap.add_argument("--evalseqs", type=int, default=128, help="calibration sequences of the printed calibration KL")
    ap.add_argument("--heldout", type=int, default=16, help="held-out windows of the printed held-out KL")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    model = T.Model("qwen35moe")
    model.load_hf(T.load_safetensors(a.model + "/model.safetensors"))
    model.eval()
    for p_ in model.parameters():
        p_.requires_grad_(False)

    seqs = read_tok(a.tok)
    L = max(len(s) for s, _ in seqs)
    ids = torch.tensor([s + [1500] * (L - len(s)) for s, _ in seqs], dtype=torch.long)
    mask = torch.zeros(ids.shape, dtype=torch.bool)
    for i, (_, n) in enumerate(seqs):
        mask[i, :n] = True
    t0 = time.time()
    hw0 = T.heldout_windows(a.heldout)
    with torch.no_grad():
        tlp = torch.cat([torch.log_softmax(model(ids[i:i + 64]).float(), -1) for i in range(0, ids.shape[0], 64)])
        htl = torch.log_softmax(model(hw0[:, :-1]).float(), -1)
    print(f"teacher {time.time()-t0:.1f}s, {int(mask.sum())} positions", flush=True)

    buf, ts = read_gguf(a.gguf)
    targets = hf_targets(model)
    qt = []
    for name, off, S, M, codes, view, perm, inv in q4k_tensors(a.gguf, buf, ts, targets):
        rows, cols = S.shape
        W = view.reshape(rows, cols)
        D = S * codes - M
        tgt = targets[name]
        rel = ((D - W[perm]).norm() / W.norm()).item()
        # HF order
        S, M, codes = S[inv], M[inv], codes[inv]
        U = torch.zeros(rows, cols, requires_grad=True)
        c = (W + M) / S
        on = (a.only == "" or any(s in name for s in a.only.split(",")))
        qt.append(dict(name=name, tgt=tgt, S=S, M=M, q0=codes.float(), U=U, perm=perm, off=off,
                       on=on, c=c, D=codes.float() - torch.round(c)))
        print(f"{name}: rel err {rel:.4f}, permuted rows {int((perm != torch.arange(rows)).sum())}, opt {on}", flush=True)

    def install():
        groups = {}
        for t in qt:
            q = t["q0"]
            if t["on"]:
                x = t["c"] + t["U"]
                xr = x + (torch.round(x) - x).detach()
                q = torch.clamp(xr + t["D"], 0, 15)
            Wq = t["S"] * q - t["M"]
            tgt = t["tgt"]
            if len(tgt) == 3:
                groups.setdefault((id(tgt[0]), tgt[1]), [tgt[0], tgt[1], {}])[2][tgt[2]] = Wq
            else:
                mod, attr = tgt
                if attr in mod._parameters:
                    del mod._parameters[attr]
                setattr(mod, attr, Wq)
        for mod, attr, parts in groups.values():
            E = mod.E
            g = parts[0].view(E, -1, parts[0].shape[1])
            u = parts[1].view(E, -1, parts[1].shape[1])
            if attr in mod._parameters:
                del mod._parameters[attr]
            setattr(mod, attr, torch.cat([g, u], 1))

    def kl_all(batch_idx=None):
        sel = slice(None) if batch_idx is None else batch_idx
        lp = torch.log_softmax(model(ids[sel]).float(), -1)
        tl = tlp[sel]
        kl = (tl.exp() * (tl - lp)).sum(-1)
        m = mask[sel]
        return (kl * m).sum() / m.sum()

    install()
    with torch.no_grad():
        k0 = kl_all(torch.arange(min(a.evalseqs, ids.shape[0]))).item()
    print(f"start calibration KL {k0:.6f}", flush=True)

    def heldout_kl():
        with torch.no_grad():
            lp = torch.log_softmax(model(hw0[:, :-1]).float(), -1)
            return (htl.exp() * (htl - lp)).sum(-1).mean().item()

    on = [t for t in qt if t["on"]]
    h0 = heldout_kl()
    print(f"start held-out KL {h0:.6f}", flush=True)
    best = (k0, [t["U"].detach().clone() for t in qt], h0)
    for step in range(a.steps):
        t1 = time.time()
        lr = a.lr * (1 - step / a.steps)
        install()
        loss = kl_all(torch.randperm(ids.shape[0])[: a.batch] if a.batch < ids.shape[0] else None)
        grads = torch.autograd.grad(loss, [t["U"] for t in on])
        with torch.no_grad():
            for t, g in zip(on, grads):
                t["U"] -= lr * g.sign()
                t["U"].clamp_(-0.5, 0.5)
        line = f"step {step+1}: loss {loss.item():.6f}, {time.time()-t1:.1f}s"
        if (step + 1) % a.every == 0 or step == a.steps - 1:
            with torch.no_grad():
                install()
                k = kl_all(torch.arange(min(a.evalseqs, ids.shape[0]))).item()
                h = heldout_kl()
            ch = 0
            for t in on:
                q = torch.clamp(torch.round(t["c"] + t["U"]) + t["D"], 0, 15)
                ch += int((q != t["q0"]).sum())
            line += f", cal KL {k:.6f}, held-out {h:.6f}, codes changed {ch}"
            if k < best[0]:
                best = (k, [t["U"].detach().clone() for t in qt], h)
        print(line, flush=True)
    print(f"best cal KL {best[0]:.6f} held-out {best[2]:.6f} (start {k0:.6f} / {h0:.6f})", flush=True)
    for t, U in zip(qt, best[1]):
        q = (torch.clamp(torch.round(t["c"] + U) + t["D"], 0, 15) if t["on"] else t["q0"]).long()
        q4k_write(buf, t["off"], q[t["perm"]])
    with open(a.out, "wb") as f:
        f.write(buf)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
