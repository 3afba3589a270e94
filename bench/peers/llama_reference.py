#!/usr/bin/env python3
"""A LLaMA-family forward/backward written by hand in PyTorch (1.13; no transformers package), the
peer of mixp's nn::Llama (tests/llama/test_llama_vs_torch.cpp, issue 31 item 4).

Mode `make`: draws a checkpoint in Hugging Face's layout (config.json + model.safetensors, fp32, or
sharded with an index; every tensor from a seeded generator, norm weights and biases too so that a
mix-up of two tensors shows), a batch of tokens, and writes reference.safetensors with the fp32
logits, the mean cross-entropy loss, every parameter's gradient ("grad.<HF name>"), and the losses
and parameters after 10 AdamW steps (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01).
Mode `read`: reads a checkpoint directory (as mixp writes it: any of F32/BF16/F16, one file or
shards) and writes the logits of the batch in reference.safetensors to logits.safetensors.

The model follows transformers' modeling_llama.py / modeling_qwen2.py: RMSNorm in fp32, RoPE in the
rotate_half layout with the default, linear and llama3 inverse frequencies (computed in float64,
as mixp does, then the cos/sin tables rounded to fp32), repeat_kv for grouped-query attention,
causal softmax attention with scale 1/sqrt(D), SwiGLU MLP, untied or tied head.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import write_safetensors  # noqa: E402  (one safetensors writer for the peers)

DT = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64,
      "I32": torch.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=torch.uint8) if end > b \
            else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(DT[e["dtype"]]).reshape(e["shape"]).clone()
    return out


def read_checkpoint(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        w = read_safetensors(single)
    else:
        index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        w = {}
        for shard in sorted(set(index["weight_map"].values())):
            w.update(read_safetensors(os.path.join(d, shard)))
    return cfg, {k: v.float() for k, v in w.items()}


def inv_freq(cfg):
    D = cfg["hidden_size"] // cfg["num_attention_heads"]
    theta = cfg.get("rope_theta", 10000.0)
    f = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    rs = cfg.get("rope_scaling")
    if rs:
        kind = rs.get("rope_type", rs.get("type"))
        if kind == "linear":
            f = f / rs["factor"]
        elif kind == "llama3":
            factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
            old = rs["original_max_position_embeddings"]
            wavelen = 2 * math.pi / f
            scaled = torch.where(wavelen > old / lo, f / factor, f)
            smooth = (old / wavelen - lo) / (hi - lo)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
            f = torch.where(medium, smoothed, scaled)
    return f


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(cfg, w, x):
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    D, L, eps = C // H, cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    B, T = x.shape
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq(cfg)[None, :]
    cos = torch.cat((ang.cos(), ang.cos()), -1).float()
    sin = torch.cat((ang.sin(), ang.sin()), -1).float()

    def rms(h, weight):
        v = h.float().pow(2).mean(-1, keepdim=True)
        return weight * (h * torch.rsqrt(v + eps))

    def lin(h, name):
        return F.linear(h, w[name + ".weight"], w.get(name + ".bias"))

    h = w["model.embed_tokens.weight"][x]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(L):
        p = f"model.layers.{i}."
        a = rms(h, w[p + "input_layernorm.weight"])
        q = lin(a, p + "self_attn.q_proj").view(B, T, H, D).transpose(1, 2)
        k = lin(a, p + "self_attn.k_proj").view(B, T, KV, D).transpose(1, 2)
        v = lin(a, p + "self_attn.v_proj").view(B, T, KV, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)  # repeat_kv
        v = v.repeat_interleave(H // KV, dim=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(D) + mask
        o = (torch.softmax(s.float(), -1) @ v).transpose(1, 2).reshape(B, T, C)
        h = h + lin(o, p + "self_attn.o_proj")
        m = rms(h, w[p + "post_attention_layernorm.weight"])
        g = F.silu(lin(m, p + "mlp.gate_proj")) * lin(m, p + "mlp.up_proj")
        h = h + lin(g, p + "mlp.down_proj")
    h = rms(h, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return F.linear(h, head)


def names_and_shapes(cfg):
    C, H, F_ = cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
    KV = cfg.get("num_key_value_heads", H)
    kvw, V, bias = C // H * KV, cfg["vocab_size"], cfg["model_type"] == "qwen2"
    out = [("model.embed_tokens.weight", (V, C))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for n, o in (("q", C), ("k", kvw), ("v", kvw)):
            out.append((p + f"self_attn.{n}_proj.weight", (o, C)))
            if bias:
                out.append((p + f"self_attn.{n}_proj.bias", (o,)))
        out += [(p + "self_attn.o_proj.weight", (C, C)), (p + "mlp.gate_proj.weight", (F_, C)),
                (p + "mlp.up_proj.weight", (F_, C)), (p + "mlp.down_proj.weight", (C, F_)),
                (p + "input_layernorm.weight", (C,)), (p + "post_attention_layernorm.weight", (C,))]
    out.append(("model.norm.weight", (C,)))
    if not cfg.get("tie_word_embeddings"):
        out.append(("lm_head.weight", (V, C)))
    return out


def make(a):
    cfg = {"architectures": ["Qwen2ForCausalLM" if a.qwen2 else "LlamaForCausalLM"],
           "model_type": "qwen2" if a.qwen2 else "llama", "hidden_act": "silu",
           "vocab_size": a.vocab, "hidden_size": a.width, "intermediate_size": a.mlp,
           "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
           "num_key_value_heads": a.kv_heads, "max_position_embeddings": a.context,
           "rms_norm_eps": 1e-5, "rope_theta": a.theta, "rope_scaling": None,
           "tie_word_embeddings": a.tied, "torch_dtype": "float32"}
    if a.rope == "linear":
        cfg["rope_scaling"] = {"type": "linear", "factor": 2.0}
    elif a.rope == "llama3":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    g = torch.Generator().manual_seed(a.seed)
    w = {}
    for name, shape in names_and_shapes(cfg):
        if name.endswith("norm.weight"):
            w[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            w[name] = 0.05 * torch.randn(shape, generator=g)
    ck = os.path.join(a.out, "ckpt")
    os.makedirs(ck, exist_ok=True)
    json.dump(cfg, open(os.path.join(ck, "config.json"), "w"), indent=2)
    items = list(w.items())
    if a.shards > 1:
        n = a.shards
        per = (len(items) + n - 1) // n
        wm = {}
        for s in range(n):
            part = dict(items[s * per:(s + 1) * per])
            fn = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
            write_safetensors(os.path.join(ck, fn), part, {"format": "pt"})
            wm.update({k: fn for k in part})
        json.dump({"metadata": {"total_size": sum(t.numel() * 4 for t in w.values())},
                   "weight_map": wm}, open(os.path.join(ck, "model.safetensors.index.json"), "w"))
    else:
        write_safetensors(os.path.join(ck, "model.safetensors"), w, {"format": "pt"})

    x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    params = {k: v.clone().requires_grad_() for k, v in w.items()}
    logits = forward(cfg, params, x)
    loss = F.cross_entropy(logits.reshape(-1, a.vocab), y.reshape(-1))
    loss.backward()
    ref = {"x": x, "y": y, "logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for k, p in params.items():
        ref["grad." + k] = p.grad
    # 10 AdamW steps from the same weights.
    params = {k: v.clone().requires_grad_() for k, v in w.items()}
    opt = torch.optim.AdamW(params.values(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        l = F.cross_entropy(forward(cfg, params, x).reshape(-1, a.vocab), y.reshape(-1))
        losses.append(l.item())
        l.backward()
        opt.step()
    ref["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    for k, p in params.items():
        ref["after." + k] = p.detach()
    write_safetensors(os.path.join(a.out, "reference.safetensors"), ref)


def read(a):
    cfg, w = read_checkpoint(a.ckpt)
    x = read_safetensors(os.path.join(a.out, "reference.safetensors"))["x"]
    with torch.no_grad():
        logits = forward(cfg, w, x)
    write_safetensors(os.path.join(a.out, "logits.safetensors"), {"logits": logits})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["make", "read"])
    p.add_argument("--out", required=True)
    p.add_argument("--ckpt", help="read: the checkpoint directory")
    p.add_argument("--vocab", type=int, default=96)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--mlp", type=int, default=48)
    p.add_argument("--theta", type=float, default=10000.0)
    p.add_argument("--rope", choices=["default", "linear", "llama3"], default="default")
    p.add_argument("--qwen2", action="store_true", help="q/k/v biases (model_type qwen2)")
    p.add_argument("--tied", action="store_true")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    make(a) if a.mode == "make" else read(a)


if __name__ == "__main__":
    main()
