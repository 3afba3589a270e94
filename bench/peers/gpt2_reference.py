#!/usr/bin/python3
"""GPT-2 in PyTorch with fixed random weights: the reference mixp's GPT-2 is checked against.

Builds GPT-2 (pre-LayerNorm blocks, tanh-GELU MLP, biases, learned positions, LM head tied to the
token embedding, LayerNorm eps 1e-5; the model of nn/gpt.h with tied_head), draws every parameter
from a seeded generator (biases and LayerNorm parameters too, so that a mix-up of any two tensors
shows), and writes into --out:

  model.safetensors      the weights in Hugging Face's GPT-2 layout (wte.weight, wpe.weight,
                         h.N.ln_1.*, h.N.attn.c_attn.* with Conv1D weights [in, out], ...; with
                         --prefix, every name starts with "transformer."), fp32, plus the causal
                         mask buffers h.N.attn.bias and h.N.attn.masked_bias that a reader must
                         ignore;
  reference.safetensors  the batch ("x", "y": int32 [B, T]), the fp32 loss ("loss"), the loss under
                         torch.autocast(cpu, bfloat16) ("loss_bf16"), and every parameter's fp32
                         gradient as "grad.<mixp name>" in nn.Linear's [out, in] layout
                         (grad.tok_emb.weight holds the tied embedding's summed gradient).

Used by tests/gpt2/test_gpt2_vs_torch.cpp (a tiny configuration, generated at test time) and for
real sizes by hand. Run with Debian's /usr/bin/python3 (python3-torch); safetensors is written
here by hand (8-byte header length, JSON header, raw little-endian data) since the safetensors
package is not installed.
"""
import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F


def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        dtype = {torch.float32: "F32", torch.int32: "I32", torch.int64: "I64", torch.bfloat16: "BF16",
                 torch.float16: "F16", torch.uint8: "U8"}[t.dtype]
        data = t.view(torch.uint8).numpy().tobytes() if t.dtype in (torch.bfloat16, torch.float16) \
            else t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


class Block(torch.nn.Module):
    def __init__(self, C, H, M):
        super().__init__()
        self.H = H
        self.ln1 = torch.nn.LayerNorm(C, eps=1e-5)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.proj = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C, eps=1e-5)
        self.fc = torch.nn.Linear(C, M)
        self.mproj = torch.nn.Linear(M, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.H, C // self.H).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.mproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(torch.nn.Module):
    def __init__(self, V, T, C, L, H, M):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(T, C)
        self.blocks = torch.nn.ModuleList([Block(C, H, M) for _ in range(L)])
        self.ln_f = torch.nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied head


def mixp_names(model):
    """(mixp name, parameter) pairs; Linear weights stay [out, in]."""
    out = [("tok_emb.weight", model.wte.weight), ("pos_emb.weight", model.wpe.weight)]
    parts = [("ln1", "ln1"), ("attn.qkv", "qkv"), ("attn.proj", "proj"), ("ln2", "ln2"),
             ("mlp.fc", "fc"), ("mlp.proj", "mproj")]
    for i, b in enumerate(model.blocks):
        for mixp, attr in parts:
            m = getattr(b, attr)
            out.append((f"blocks.{i}.{mixp}.weight", m.weight))
            out.append((f"blocks.{i}.{mixp}.bias", m.bias))
    out += [("ln_f.weight", model.ln_f.weight), ("ln_f.bias", model.ln_f.bias)]
    return out


def hf_tensors(model, prefix):
    hf = {"wte.weight": model.wte.weight, "wpe.weight": model.wpe.weight}
    T = model.wpe.weight.shape[0]
    for i, b in enumerate(model.blocks):
        h = f"h.{i}."
        hf[h + "ln_1.weight"], hf[h + "ln_1.bias"] = b.ln1.weight, b.ln1.bias
        hf[h + "attn.bias"] = torch.ones(T, T).tril().view(1, 1, T, T)  # causal mask buffer
        hf[h + "attn.masked_bias"] = torch.tensor(-1e4)
        hf[h + "attn.c_attn.weight"], hf[h + "attn.c_attn.bias"] = b.qkv.weight.t(), b.qkv.bias
        hf[h + "attn.c_proj.weight"], hf[h + "attn.c_proj.bias"] = b.proj.weight.t(), b.proj.bias
        hf[h + "ln_2.weight"], hf[h + "ln_2.bias"] = b.ln2.weight, b.ln2.bias
        hf[h + "mlp.c_fc.weight"], hf[h + "mlp.c_fc.bias"] = b.fc.weight.t(), b.fc.bias
        hf[h + "mlp.c_proj.weight"], hf[h + "mlp.c_proj.bias"] = b.mproj.weight.t(), b.mproj.bias
    hf["ln_f.weight"], hf["ln_f.bias"] = model.ln_f.weight, model.ln_f.bias
    return {prefix + k: v for k, v in hf.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--prefix", action="store_true", help='names start with "transformer."')
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    C = a.width
    model = Gpt2(a.vocab, a.context, C, a.layers, a.heads, 4 * C)
    with torch.no_grad():
        for name, p in mixp_names(model):
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.02 * torch.randn_like(p))
            else:
                p.copy_(0.02 * torch.randn_like(p))
    x = torch.randint(0, a.vocab, (a.batch, a.seq), dtype=torch.int64)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), dtype=torch.int64)

    loss = F.cross_entropy(model(x).view(-1, a.vocab), y.view(-1))
    loss.backward()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        loss_bf16 = F.cross_entropy(model(x).float().view(-1, a.vocab), y.view(-1))

    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "model.safetensors"),
                      hf_tensors(model, "transformer." if a.prefix else ""), {"format": "pt"})
    ref = {"x": x.to(torch.int32), "y": y.to(torch.int32),
           "loss": loss.detach().reshape(1), "loss_bf16": loss_bf16.detach().float().reshape(1)}
    for name, p in mixp_names(model):
        ref["grad." + name] = p.grad
    write_safetensors(os.path.join(a.out, "reference.safetensors"), ref)
    print(json.dumps({"loss": loss.item(), "loss_bf16": loss_bf16.item(),
                      "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
