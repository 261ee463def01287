#!/usr/bin/env python3
"""Train the small models of testdata/trained (qwen3, qwen3moe, qwen35moe) on real text.

The models exist to measure quantization quality (KL divergence against F16) on weights that
were really trained: random weights say nothing about it. Each is a few million parameters,
trained on CPU (15-30 minutes each on the shared development machine, see README.md) on the
training split of the Python 3.11 documentation written by prepare_data.py, with the
internal/fixtures byte-level BPE tokenizer (1536 ids).

    python3 testdata/trained/train.py --arch qwen3 --data /tmp/tq-trained \
        --tokenizer /tmp/tq-trained/fixture --out testdata/trained/qwen3

writes config.json, generation_config.json, tokenizer.json, tokenizer_config.json (copied from
--tokenizer, a tq-genmodel folder) and model.safetensors (BF16; A_log in F32 as in the released
Qwen3.5 checkpoints) in the layout internal/fixtures generates and tq convert reads.

    python3 testdata/trained/train.py --eval --arch qwen3 --out testdata/trained/qwen3 [--dump F]

evaluates the saved (BF16-rounded) weights in float64 on the held-out documents
(data/heldout-tokens.json) and prints the perplexity; --dump writes the next-token
probabilities of the first held-out window for the parity check against tq and llama.cpp.

The forward passes are written out in plain torch (Debian's python3-torch 1.13, no
transformers) after Hugging Face's modeling code:
  qwen3      Qwen3ForCausalLM: RMSNorm (w·x̂, float32), per-head q/k RMSNorm before NeoX RoPE
             (theta 1e6), grouped-query attention, SwiGLU MLP, untied lm_head.
  qwen3moe   Qwen3MoeForCausalLM: attention as qwen3; every layer a sparse MoE block: router
             softmax over the experts, top-k, weights renormalised (norm_topk_prob), experts
             SwiGLU (mlp.experts.E.{gate,up,down}_proj).
  qwen35moe  Qwen3_5MoeForCausalLM (Qwen3.5 / Qwen3.6 MoE): RMSNorms (1+w)·x̂ (weights stored
             around 0) except linear_attn.norm; layer i is full attention iff
             (i+1) % full_attention_interval == 0, else a Gated DeltaNet layer:
               in_proj_qkv -> causal depthwise conv1d (kernel K) -> SiLU -> q|k|v split,
               q and k L2-normalised per head (q scaled by 1/sqrt(d_k)), key heads repeated
               (repeat_interleave) to the value heads, beta = sigmoid(in_proj_b),
               g = -exp(A_log) * softplus(in_proj_a + dt_bias), per head and token
               S <- exp(g) S;  S <- S + k (beta (v - S^T k))^T;  o = S^T q   (S: d_k x d_v),
               o <- RMSNorm(o) * w * SiLU(in_proj_z), out_proj;
             full attention: q_proj gives per head [query | gate], q/k RMSNorm, RoPE on the
             first head_dim * partial_rotary_factor dims (theta 1e7; text positions are the
             same in every mrope section), softmax attention, output * sigmoid(gate), o_proj;
             FFN: routed experts (fused mlp.experts.gate_up_proj [E, 2ff, d] / down_proj
             [E, d, ff]; softmax, top-k, renormalised) plus sigmoid(shared_expert_gate) *
             SwiGLU shared expert. No MTP layer (mtp_num_hidden_layers 0).
The Gated DeltaNet runs as the token-by-token recurrence (no chunked form): slow, but it is
the definition.

Training: next-token cross-entropy on random 256-token windows of the training tokens
(documents separated by <|endoftext|>), AdamW (betas 0.9/0.95, weight decay 0.1 on matrices),
linear warm-up then cosine decay to 10%, gradient clipping at 1, MoE load-balancing loss
(coefficient 0.01, the Switch-Transformer form), float32, fixed seeds, --threads torch threads
(1 for the committed models; the result depends on the step count, seed, torch build and
thread count).
"""
import argparse
import copy
import json
import math
import os
import shutil
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
EOT, IM_END, VOCAB = 1500, 1502, 1536
CTX = 256

# Architectures: dimensions chosen for a few million parameters, every input dimension a
# multiple of 256 so that all GGUF block formats (K-quants included) apply unchanged.
ARCHS = {
    "qwen3": dict(hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, ff=768),
    "qwen3moe": dict(hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, ff=768,
                     experts=8, experts_used=2, moe_ff=256),
    "qwen35moe": dict(hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64,
                      experts=6, experts_used=2, moe_ff=256, shared_ff=256,
                      lin_k_heads=2, lin_v_heads=4, lin_head_dim=64, conv_kernel=4,
                      full_attention_interval=4, partial_rotary=0.25),
}
RMS_EPS = 1e-6


def rope_sections(head_dim):
    """internal/fixtures ropeSections: head_dim/8 pairs split like Qwen3.5's [11, 11, 10]."""
    pairs = head_dim // 8
    s = [pairs // 3] * 3
    for i in range(pairs % 3):
        s[i] += 1
    return s


# ---------------------------------------------------------------------------------------------
# model


class RMSNorm(nn.Module):
    """w·x̂ (offset=False) or (1+w)·x̂ with w stored around 0 (offset=True, Qwen3.5)."""

    def __init__(self, n, offset=False):
        super().__init__()
        self.offset = offset
        self.weight = nn.Parameter(torch.zeros(n) if offset else torch.ones(n))

    def forward(self, x):
        xf = x.float() if x.dtype != torch.float64 else x
        xn = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)
        w = self.weight.to(xn.dtype)
        return xn * (1 + w) if self.offset else xn * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_tables(t, rot_dim, theta, dtype):
    inv = 1.0 / (theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim))
    fr = torch.outer(torch.arange(t, dtype=torch.float64), inv)
    emb = torch.cat((fr, fr), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class Attention(nn.Module):
    """Qwen3 attention; gated=True is the Qwen3.5 gated variant (query|gate per head,
    (1+w) q/k norms, partial rotary)."""

    def __init__(self, c, gated):
        super().__init__()
        d, hd = c["hidden"], c["head_dim"]
        self.nh, self.nkv, self.hd, self.gated = c["heads"], c["kv_heads"], hd, gated
        self.q_proj = nn.Linear(d, self.nh * hd * (2 if gated else 1), bias=False)
        self.k_proj = nn.Linear(d, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(d, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nh * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, offset=gated)
        self.k_norm = RMSNorm(hd, offset=gated)
        self.rot = int(hd * c["partial_rotary"]) if gated else hd

    def forward(self, h, rope, mask):
        b, t, _ = h.shape
        cos, sin = rope
        if self.gated:
            qg = self.q_proj(h).view(b, t, self.nh, 2 * self.hd)
            q, gate = qg[..., : self.hd], qg[..., self.hd:].reshape(b, t, self.nh * self.hd)
        else:
            q = self.q_proj(h).view(b, t, self.nh, self.hd)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(b, t, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.nkv, self.hd).transpose(1, 2)
        r = self.rot
        q = torch.cat((q[..., :r] * cos + rotate_half(q[..., :r]) * sin, q[..., r:]), dim=-1)
        k = torch.cat((k[..., :r] * cos + rotate_half(k[..., :r]) * sin, k[..., r:]), dim=-1)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        o = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, self.nh * self.hd)
        if self.gated:
            o = o * torch.sigmoid(gate)
        return self.o_proj(o)


def l2norm(x):
    """transformers' l2norm (fla): x * rsqrt(sum(x^2) + 1e-6)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


class GatedDeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["hidden"]
        self.hk, self.hv, self.dh, self.K = c["lin_k_heads"], c["lin_v_heads"], c["lin_head_dim"], c["conv_kernel"]
        self.kd, self.vd = self.hk * self.dh, self.hv * self.dh
        self.cd = 2 * self.kd + self.vd
        self.in_proj_qkv = nn.Linear(d, self.cd, bias=False)
        self.in_proj_z = nn.Linear(d, self.vd, bias=False)
        self.in_proj_b = nn.Linear(d, self.hv, bias=False)
        self.in_proj_a = nn.Linear(d, self.hv, bias=False)
        self.conv1d = nn.Conv1d(self.cd, self.cd, self.K, groups=self.cd, bias=False, padding=self.K - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.hv).uniform_(1, 16)))
        self.norm = RMSNorm(self.dh)  # plain w·x̂, weights around 1
        self.out_proj = nn.Linear(self.vd, d, bias=False)

    def forward(self, h, rope, mask):
        b, t, _ = h.shape
        mixed = self.conv1d(self.in_proj_qkv(h).transpose(1, 2))[..., :t]
        mixed = F.silu(mixed).transpose(1, 2)
        q, k, v = torch.split(mixed, [self.kd, self.kd, self.vd], dim=-1)
        q = q.reshape(b, t, self.hk, self.dh)
        k = k.reshape(b, t, self.hk, self.dh)
        v = v.reshape(b, t, self.hv, self.dh)
        z = self.in_proj_z(h).view(b, t, self.hv, self.dh)
        beta = torch.sigmoid(self.in_proj_b(h))
        g = -self.A_log.to(h.dtype).exp() * F.softplus(self.in_proj_a(h) + self.dt_bias)
        rep = self.hv // self.hk
        q = l2norm(q.repeat_interleave(rep, dim=2)) / math.sqrt(self.dh)
        k = l2norm(k.repeat_interleave(rep, dim=2))
        S = h.new_zeros(b, self.hv, self.dh, self.dh)
        decay = g.exp()
        outs = []
        for i in range(t):
            S = S * decay[:, i, :, None, None]
            ki = k[:, i]
            kv = torch.einsum("bhkv,bhk->bhv", S, ki)
            delta = (v[:, i] - kv) * beta[:, i, :, None]
            S = S + ki[..., :, None] * delta[..., None, :]
            outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, i]))
        o = torch.stack(outs, dim=1)
        o = self.norm(o) * F.silu(z)
        return self.out_proj(o.reshape(b, t, self.vd))


class SwiGLU(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Router softmax, top-k, renormalised; experts as stacked [E, 2ff, d] / [E, d, ff]."""

    def __init__(self, c, shared):
        super().__init__()
        d, E, ff = c["hidden"], c["experts"], c["moe_ff"]
        self.E, self.k, self.ff = E, c["experts_used"], ff
        self.gate = nn.Linear(d, E, bias=False)
        self.gate_up = nn.Parameter(torch.empty(E, 2 * ff, d))
        self.down = nn.Parameter(torch.empty(E, d, ff))
        self.shared = SwiGLU(d, c["shared_ff"]) if shared else None
        self.shared_gate = nn.Linear(d, 1, bias=False) if shared else None
        self.aux = None

    def forward(self, x):
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.gate(h).float(), dim=-1).to(h.dtype)
        w, idx = torch.topk(probs, self.k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in range(self.E):
            sel = idx == e
            rows = sel.any(-1).nonzero().squeeze(-1)
            if rows.numel() == 0:
                continue
            we = (w * sel).sum(-1)[rows]
            gu = h[rows] @ self.gate_up[e].t()
            y = (F.silu(gu[:, : self.ff]) * gu[:, self.ff:]) @ self.down[e].t()
            out.index_add_(0, rows, y * we[:, None])
        if self.training:
            frac = F.one_hot(idx, self.E).sum(1).float().mean(0) / self.k
            self.aux = self.E * (frac * probs.float().mean(0)).sum()
        if self.shared is not None:
            out = out + torch.sigmoid(self.shared_gate(h)) * self.shared(h)
        return out.view(shape)


class Block(nn.Module):
    def __init__(self, c, arch, il):
        super().__init__()
        hybrid = arch == "qwen35moe"
        self.linear = hybrid and (il + 1) % c["full_attention_interval"] != 0
        self.input_layernorm = RMSNorm(c["hidden"], offset=hybrid)
        self.post_attention_layernorm = RMSNorm(c["hidden"], offset=hybrid)
        self.attn = GatedDeltaNet(c) if self.linear else Attention(c, gated=hybrid)
        self.mlp = SwiGLU(c["hidden"], c["ff"]) if arch == "qwen3" else MoE(c, shared=hybrid)

    def forward(self, x, rope, mask):
        x = x + self.attn(self.input_layernorm(x), rope, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, arch):
        super().__init__()
        self.arch, self.c = arch, ARCHS[arch]
        c = self.c
        self.hybrid = arch == "qwen35moe"
        self.embed_tokens = nn.Embedding(VOCAB, c["hidden"])
        self.layers = nn.ModuleList([Block(c, arch, i) for i in range(c["layers"])])
        self.norm = RMSNorm(c["hidden"], offset=self.hybrid)
        self.lm_head = nn.Linear(c["hidden"], VOCAB, bias=False)
        out_std = 0.02 / math.sqrt(2 * c["layers"])
        for name, p in self.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight", "out_proj.weight")) or name.endswith(".down"):
                nn.init.normal_(p, std=out_std)
            elif p.dim() >= 2 and "conv1d" not in name:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.embed_tokens(ids)
        dt = x.dtype
        c = self.c
        rot = int(c["head_dim"] * c["partial_rotary"]) if self.hybrid else c["head_dim"]
        rope = rope_tables(t, rot, 1e7 if self.hybrid else 1e6, dt)
        mask = torch.full((t, t), float("-inf"), dtype=dt).triu(1)
        for layer in self.layers:
            x = layer(x, rope, mask)
        return self.lm_head(self.norm(x))

    def aux_loss(self):
        aux = [l.mlp.aux for l in self.layers if isinstance(l.mlp, MoE) and l.mlp.aux is not None]
        return sum(aux) / len(aux) if aux else None

    # -- Hugging Face layout ------------------------------------------------------------------

    def hf_state(self):
        """(name, tensor, dtype) in the order internal/fixtures writes them."""
        bf, f32 = "BF16", "F32"
        out = [("model.embed_tokens.weight", self.embed_tokens.weight, bf)]
        for i, l in enumerate(self.layers):
            p = f"model.layers.{i}."
            out.append((p + "input_layernorm.weight", l.input_layernorm.weight, bf))
            a = l.attn
            if isinstance(a, GatedDeltaNet):
                la = p + "linear_attn."
                out += [(la + "in_proj_qkv.weight", a.in_proj_qkv.weight, bf),
                        (la + "in_proj_z.weight", a.in_proj_z.weight, bf),
                        (la + "in_proj_b.weight", a.in_proj_b.weight, bf),
                        (la + "in_proj_a.weight", a.in_proj_a.weight, bf),
                        (la + "conv1d.weight", a.conv1d.weight, bf),
                        (la + "dt_bias", a.dt_bias, bf),
                        (la + "A_log", a.A_log, f32),
                        (la + "norm.weight", a.norm.weight, bf),
                        (la + "out_proj.weight", a.out_proj.weight, bf)]
            else:
                sa = p + "self_attn."
                out += [(sa + "q_proj.weight", a.q_proj.weight, bf),
                        (sa + "k_proj.weight", a.k_proj.weight, bf),
                        (sa + "v_proj.weight", a.v_proj.weight, bf),
                        (sa + "o_proj.weight", a.o_proj.weight, bf)]
                # fixtures order: qwen3/qwen3moe norms after o_proj; qwen35 the same
                out += [(sa + "q_norm.weight", a.q_norm.weight, bf),
                        (sa + "k_norm.weight", a.k_norm.weight, bf)]
            out.append((p + "post_attention_layernorm.weight", l.post_attention_layernorm.weight, bf))
            m = l.mlp
            if isinstance(m, SwiGLU):
                out += [(p + "mlp.gate_proj.weight", m.gate_proj.weight, bf),
                        (p + "mlp.up_proj.weight", m.up_proj.weight, bf),
                        (p + "mlp.down_proj.weight", m.down_proj.weight, bf)]
                continue
            out.append((p + "mlp.gate.weight", m.gate.weight, bf))
            if self.hybrid:
                out += [(p + "mlp.experts.gate_up_proj", m.gate_up, bf),
                        (p + "mlp.experts.down_proj", m.down, bf)]
            else:
                for e in range(m.E):
                    ep = f"{p}mlp.experts.{e}."
                    out += [(ep + "gate_proj.weight", m.gate_up[e, : m.ff], bf),
                            (ep + "up_proj.weight", m.gate_up[e, m.ff:], bf),
                            (ep + "down_proj.weight", m.down[e], bf)]
            if m.shared is not None:
                out += [(p + "mlp.shared_expert.gate_proj.weight", m.shared.gate_proj.weight, bf),
                        (p + "mlp.shared_expert.up_proj.weight", m.shared.up_proj.weight, bf),
                        (p + "mlp.shared_expert.down_proj.weight", m.shared.down_proj.weight, bf),
                        (p + "mlp.shared_expert_gate.weight", m.shared_gate.weight, bf)]
        out += [("model.norm.weight", self.norm.weight, bf), ("lm_head.weight", self.lm_head.weight, bf)]
        return out

    def load_hf(self, tensors):
        with torch.no_grad():
            for name, p, _ in self.hf_state():
                src = tensors.pop(name)
                if tuple(src.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: shape {tuple(src.shape)}, want {tuple(p.shape)}")
                p.copy_(src)
        if tensors:
            raise ValueError(f"unexpected tensors: {sorted(tensors)[:5]}")


# ---------------------------------------------------------------------------------------------
# files


def save_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t, dt in tensors:
        t = t.detach().contiguous()
        if dt == "BF16":
            b = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        else:
            b = t.to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = bytearray(data[a:b])
        if info["dtype"] == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16).float()
        elif info["dtype"] == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32).clone()
        else:
            raise ValueError(f"{name}: dtype {info['dtype']}")
        out[name] = t.reshape(info["shape"])
    return out


def config_json(arch):
    """config.json with the keys (and order) internal/fixtures writes for the architecture."""
    c = ARCHS[arch]
    if arch != "qwen35moe":
        cfg = {
            "architectures": ["Qwen3ForCausalLM" if arch == "qwen3" else "Qwen3MoeForCausalLM"],
            "model_type": "qwen3" if arch == "qwen3" else "qwen3_moe",
            "hidden_size": c["hidden"], "intermediate_size": c["ff"], "num_hidden_layers": c["layers"],
            "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"], "head_dim": c["head_dim"],
            "vocab_size": VOCAB, "max_position_embeddings": CTX, "rms_norm_eps": RMS_EPS,
            "rope_theta": 1000000.0, "rope_scaling": None, "hidden_act": "silu", "initializer_range": 0.02,
            "tie_word_embeddings": False, "attention_dropout": 0.0, "use_cache": True,
            "bos_token_id": EOT, "eos_token_id": IM_END, "torch_dtype": "bfloat16", "attention_bias": False,
        }
        if arch == "qwen3moe":
            cfg.update({"num_experts": c["experts"], "num_experts_per_tok": c["experts_used"],
                        "moe_intermediate_size": c["moe_ff"], "norm_topk_prob": True, "decoder_sparse_step": 1,
                        "mlp_only_layers": [], "output_router_logits": False, "router_aux_loss_coef": 0.001})
        cfg.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": c["layers"]})
        return cfg
    types = ["full_attention" if (i + 1) % c["full_attention_interval"] == 0 else "linear_attention"
             for i in range(c["layers"])]
    return {
        "architectures": ["Qwen3_5MoeForCausalLM"], "bos_token_id": EOT,
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "dtype": "bfloat16",
        "eos_token_id": IM_END, "full_attention_interval": c["full_attention_interval"],
        "head_dim": c["head_dim"], "hidden_act": "silu", "hidden_size": c["hidden"], "initializer_range": 0.02,
        "layer_types": types, "linear_conv_kernel_dim": c["conv_kernel"],
        "linear_key_head_dim": c["lin_head_dim"], "linear_num_key_heads": c["lin_k_heads"],
        "linear_num_value_heads": c["lin_v_heads"], "linear_value_head_dim": c["lin_head_dim"],
        "mamba_ssm_dtype": "float32", "max_position_embeddings": CTX, "mlp_only_layers": [],
        "model_type": "qwen3_5_moe_text", "moe_intermediate_size": c["moe_ff"],
        "mtp_num_hidden_layers": 0, "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": c["heads"], "num_experts": c["experts"], "num_experts_per_tok": c["experts_used"],
        "num_hidden_layers": c["layers"], "num_key_value_heads": c["kv_heads"], "output_router_logits": False,
        "rms_norm_eps": RMS_EPS,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": rope_sections(c["head_dim"]),
                            "partial_rotary_factor": c["partial_rotary"], "rope_theta": 10000000, "rope_type": "default"},
        "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": c["shared_ff"],
        "use_cache": True, "vocab_size": VOCAB, "tie_word_embeddings": False,
    }


def write_folder(model, out, tokenizer_dir, meta):
    os.makedirs(out, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copyfile(os.path.join(tokenizer_dir, f), os.path.join(out, f))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config_json(model.arch), f, indent=2)
        f.write("\n")
    save_safetensors(os.path.join(out, "model.safetensors"), model.hf_state())
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# data and evaluation


def heldout_windows(n=None):
    """Held-out token windows of CTX tokens: each document's ids preceded by <|endoftext|>,
    the documents concatenated, cut into consecutive windows (the tail is dropped)."""
    d = json.load(open(os.path.join(HERE, "data", "heldout-tokens.json")))
    ids = []
    for doc in d["documents"]:
        ids.append(d["eot"])
        ids.extend(doc["ids"])
    w = [ids[i:i + CTX] for i in range(0, len(ids) - CTX + 1, CTX)]
    return torch.tensor(w[:n] if n else w, dtype=torch.long)


@torch.no_grad()
def heldout_nll(model, windows, batch=8):
    """Mean next-token negative log-likelihood over every position of every window."""
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch]
        logits = model(w[:, :-1])
        lp = torch.log_softmax(logits.double(), -1)
        tot += -lp.gather(-1, w[:, 1:, None]).sum().item()
        n += w[:, 1:].numel()
    model.train()
    return tot / n


def train(a):
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    data = torch.from_numpy(__import__("numpy").fromfile(os.path.join(a.data, "train.u16"), dtype="<u2").astype("int64"))
    model = Model(a.arch)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"{a.arch}: {nparam} parameters, {len(data)} training tokens", flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    val = heldout_windows(8)
    gen = torch.Generator().manual_seed(a.seed + 1)
    t0 = time.time()
    log = []
    steps = a.steps
    if not steps:
        # --minutes: time two training steps of a throw-away copy, then fix the step count;
        # the run is a function of the step count only (rerun with --steps N to reproduce it).
        probe = copy.deepcopy(model)
        pg = torch.Generator().manual_seed(0)
        for _ in range(2):
            x = torch.randint(0, VOCAB, (a.batch, CTX + 1), generator=pg)
            F.cross_entropy(probe(x[:, :-1]).reshape(-1, VOCAB), x[:, 1:].reshape(-1)).backward()
        steps = max(10, int(a.minutes * 60 / ((time.time() - t0) / 2)))
        del probe
        print(f"--minutes {a.minutes}: {steps} steps", flush=True)
        t0 = time.time()
    for step in range(steps):
        warm = min(1.0, (step + 1) / a.warmup)
        cos = 0.5 * (1 + math.cos(math.pi * step / steps))
        lr = a.lr * warm * (0.1 + 0.9 * cos)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - CTX - 1, (a.batch,), generator=gen)
        x = torch.stack([data[s:s + CTX + 1] for s in starts.tolist()])
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        total = loss
        aux = model.aux_loss()
        if aux is not None:
            total = total + a.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        last = step == steps - 1
        if step % 10 == 0 or last:
            msg = f"step {step:5d} loss {loss.item():.4f} lr {lr:.2e} {time.time() - t0:7.1f}s"
            if aux is not None:
                msg += f" aux {aux.item():.3f}"
            if last:
                v = heldout_nll(model, val)
                msg += f" | held-out nll {v:.4f} ppl {math.exp(v):.2f}"
                log.append({"step": step, "train_loss": loss.item(), "heldout_nll": v, "seconds": time.time() - t0})
            print(msg, flush=True)
    secs = time.time() - t0
    meta = {"arch": a.arch, "parameters": nparam, "steps": steps, "batch": a.batch, "context": CTX,
            "tokens_seen": steps * a.batch * CTX, "lr": a.lr, "warmup": a.warmup, "aux_coef": a.aux_coef,
            "seed": a.seed, "threads": a.threads, "train_seconds": round(secs, 1),
            "torch": torch.__version__, "log": log}
    write_folder(model, a.out, a.tokenizer, meta)
    print(f"saved {a.out} after {secs:.0f}s", flush=True)


def random_weights(a):
    """A folder with random weights of trained-like scale (matrices N(0, 1/fan_in), norms
    and gates away from their initial values): the forward-pass parity check uses it before
    training, since a freshly initialised model predicts an almost uniform distribution that
    hides formula errors."""
    torch.manual_seed(a.seed)
    model = Model(a.arch)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.uniform_(-3, 1.5)
            elif name.endswith("dt_bias"):
                p.normal_(0, 0.5)
            elif "conv1d" in name:
                p.normal_(0, 0.5)
            elif p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.3)  # around 1 (w·x̂) or around 0 ((1+w)·x̂)
            elif "embed_tokens" in name:
                p.normal_(0, 1.0)
            else:
                p.normal_(0, 1.5 / math.sqrt(p.shape[-1]))
    write_folder(model, a.out, a.tokenizer, {"arch": a.arch, "random_weights": True, "seed": a.seed})
    print(f"saved random weights to {a.out}")


def evaluate(a):
    model = Model(a.arch)
    model.load_hf(load_safetensors(os.path.join(a.out, "model.safetensors")))
    model = model.double()
    torch.set_num_threads(a.threads)
    w = heldout_windows(a.windows)
    if not a.no_ppl:
        nll = heldout_nll(model, w)
        res = {"arch": a.arch, "windows": len(w), "positions": int(w[:, 1:].numel()), "nll": nll, "ppl": math.exp(nll)}
        print(json.dumps(res))
    if a.dump or a.ref:
        with torch.no_grad():
            model.eval()
            first = w[:1]
            p = torch.softmax(model(first)[0], -1)
    if a.dump:
        with open(a.dump, "w") as f:
            json.dump({"tokens": first[0].tolist(), "probs": p.tolist()}, f)
    if a.ref:
        # the committed reference of the Go smoke test: top 8 of the first 64 positions
        n, k = 64, 8
        top = torch.topk(p[:n], k, dim=-1)
        with open(a.ref, "w") as f:
            f.write('{"note": "train.py --eval: float64 torch forward of model.safetensors on the first 64 tokens of held-out window 0; the 8 most probable next tokens per position",\n')
            f.write(' "tokens": %s,\n "top": [\n' % json.dumps(first[0, :n].tolist()))
            f.write(",\n".join("  " + json.dumps([[int(i), float("%.9g" % v)] for i, v in zip(ti.tolist(), tv.tolist())])
                                for ti, tv in zip(top.indices, top.values)))
            f.write("\n ]}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, choices=sorted(ARCHS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", help="folder with train.u16 (prepare_data.py --work)")
    ap.add_argument("--tokenizer", help="folder with the fixtures' tokenizer files (tq-genmodel output)")
    ap.add_argument("--eval", action="store_true", help="evaluate the saved model instead of training")
    ap.add_argument("--random-weights", action="store_true", help="write random trained-scale weights (parity check)")
    ap.add_argument("--dump", help="--eval: write the first held-out window's probabilities here")
    ap.add_argument("--ref", help="--eval: write the smoke test's reference (top 8 of 64 positions) here")
    ap.add_argument("--windows", type=int, default=0, help="--eval: held-out windows to score (0: all)")
    ap.add_argument("--no-ppl", action="store_true", help="--eval: skip the perplexity")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps (0: from --minutes)")
    ap.add_argument("--minutes", type=float, default=20, help="without --steps: train about this long")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=10, help="linear warm-up steps")
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("TRAIN_THREADS", "2")))
    a = ap.parse_args()
    if a.eval:
        evaluate(a)
    elif a.random_weights:
        if not a.tokenizer:
            sys.exit("train: --tokenizer is required")
        random_weights(a)
    else:
        if not a.data or not a.tokenizer:
            sys.exit("train: --data and --tokenizer are required")
        train(a)


if __name__ == "__main__":
    main()
