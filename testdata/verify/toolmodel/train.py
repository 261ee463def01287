#!/usr/bin/env python3
"""Train tq's tool-calling test model (testdata/verify/toolmodel).

A tiny Qwen3 (2 layers, hidden 128, 2 query heads / 1 KV head of 64, MLP 256, the fixtures'
1536-token byte-level BPE vocabulary and ChatML template, see config.json) that answers every case of `tq verify`'s built-in tool-call suite with
the right tool call. It exists so that the tool-call gate can be tested on a model that really
emits <tool_call> blocks; it memorizes the suite, it is not a general model.

Inputs: config.json and the tokenizer in this folder, and the token ids written by
    go run ./verify/internal/toolmodel/gendata -model testdata/verify/toolmodel -out /tmp/toolmodel-data.json
Output: model.safetensors (BF16) in this folder.

Requires Debian's python3-torch (tested with 1.13). Deterministic for a given torch build:
    python3 testdata/verify/toolmodel/train.py /tmp/toolmodel-data.json

The forward pass is written out (no transformers needed) and follows Hugging Face's
Qwen3ForCausalLM: RMSNorm in float32, per-head q/k RMSNorm before RoPE, NeoX-style RoPE with
rope_theta, grouped-query attention, SwiGLU MLP, untied lm_head.
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(v + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["hidden_size"], c["head_dim"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], hd
        eps = c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(d, eps)
        self.post_attention_layernorm = RMSNorm(d, eps)
        self.q_proj = nn.Linear(d, self.nh * hd, bias=False)
        self.k_proj = nn.Linear(d, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(d, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nh * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, eps)
        self.k_norm = RMSNorm(hd, eps)
        f = c["intermediate_size"]
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_norm(self.q_proj(h).view(b, t, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(b, t, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        o = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, self.nh * self.hd)
        x = x + self.o_proj(o)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=c["initializer_range"])

    def forward(self, ids):
        t = ids.shape[1]
        hd = self.c["head_dim"]
        inv = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        fr = torch.outer(torch.arange(t, dtype=torch.float32), inv)
        emb = torch.cat((fr, fr), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.full((t, t), float("-inf")).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))

    def hf_state(self):
        """Tensors under Hugging Face names, in the fixture's order."""
        out = [("model.embed_tokens.weight", self.embed_tokens.weight)]
        for i, l in enumerate(self.layers):
            p = f"model.layers.{i}."
            out += [
                (p + "input_layernorm.weight", l.input_layernorm.weight),
                (p + "self_attn.q_proj.weight", l.q_proj.weight),
                (p + "self_attn.k_proj.weight", l.k_proj.weight),
                (p + "self_attn.v_proj.weight", l.v_proj.weight),
                (p + "self_attn.o_proj.weight", l.o_proj.weight),
                (p + "self_attn.q_norm.weight", l.q_norm.weight),
                (p + "self_attn.k_norm.weight", l.k_norm.weight),
                (p + "post_attention_layernorm.weight", l.post_attention_layernorm.weight),
                (p + "mlp.gate_proj.weight", l.gate_proj.weight),
                (p + "mlp.up_proj.weight", l.up_proj.weight),
                (p + "mlp.down_proj.weight", l.down_proj.weight),
            ]
        out += [("model.norm.weight", self.norm.weight), ("lm_head.weight", self.lm_head.weight)]
        return out


def save_safetensors(path, tensors):
    """Write BF16 tensors in the safetensors format (8-byte header length, JSON, data)."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        b = t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
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


def main():
    data = json.load(open(sys.argv[1]))["examples"]
    cfg = json.load(open(os.path.join(HERE, "config.json")))
    torch.manual_seed(1234)
    torch.set_num_threads(int(os.environ.get("TRAIN_THREADS", "2")))
    model = Model(cfg)
    n = max(len(e["prompt"]) + len(e["completion"]) for e in data)
    ids = torch.zeros((len(data), n), dtype=torch.long)
    target = torch.full((len(data), n), -100, dtype=torch.long)
    for i, e in enumerate(data):
        seq = e["prompt"] + e["completion"]
        ids[i, : len(seq)] = torch.tensor(seq)
        p = len(e["prompt"])
        # logits at position j predict token j+1: learn the completion only
        target[i, p - 1 : len(seq) - 1] = torch.tensor(e["completion"])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    steps = int(os.environ.get("TRAIN_STEPS", "400"))
    for step in range(steps):
        lr = 3e-3 * min(1.0, (step + 1) / 20) * (0.5 * (1 + math.cos(math.pi * step / steps)) * 0.9 + 0.1)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(ids)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), target.view(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            mask = target != -100
            pred = logits.argmax(-1)
            acc = (pred[mask] == target[mask]).float().mean().item()
            # smallest margin between the target logit and the best other logit
            tl = logits.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            other = logits.scatter(-1, target.clamp(min=0).unsqueeze(-1), float("-inf")).max(-1).values
            margin = (tl - other)[mask].min().item()
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step:4d} loss {loss.item():.5f} acc {acc:.4f} min margin {margin:.2f}", flush=True)
    save_safetensors(os.path.join(HERE, "model.safetensors"), model.hf_state())
    print("saved", os.path.join(HERE, "model.safetensors"))


if __name__ == "__main__":
    main()
