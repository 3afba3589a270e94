#!/usr/bin/python3
"""LoRA on GPT-2 in PyTorch: the reference for mixp's adapter gradients (nn/lora.h).

The model and weights of gpt2_reference.py (same arguments and seed), with LoRA adapters on the
attention's c_attn and the MLP's c_fc and c_proj, as Hugging Face PEFT's lora.Linear computes
them (src/peft/tuners/lora/layer.py): y = base(x) + scaling * lora_B(lora_A(x)), scaling =
alpha / r, no dropout (deterministic). A and B are drawn non-zero (PEFT starts B at zero; a zero
B would make A's gradient zero and test nothing). Writes into --out:

  model.safetensors          the base in Hugging Face's GPT-2 layout (gpt2_reference.py);
  reference.safetensors      "x", "y", the fp32 "loss", and per adapter weight its value
                             ("value.<mixp name>") and fp32 gradient ("grad.<mixp name>"), mixp
                             names such as blocks.0.attn.qkv.lora_A.weight ([r, in]) and
                             blocks.0.attn.qkv.lora_B.weight ([out, r]).

Used by tests/gpt2/test_lora_vs_torch.cpp. Run with Debian's /usr/bin/python3 (python3-torch).
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import Gpt2, hf_tensors, mixp_names, write_safetensors  # noqa: E402


class LoraLinear(torch.nn.Module):
    def __init__(self, base, r, alpha, gen):
        super().__init__()
        self.base = base
        self.lora_A = torch.nn.Linear(base.in_features, r, bias=False)
        self.lora_B = torch.nn.Linear(r, base.out_features, bias=False)
        with torch.no_grad():
            self.lora_A.weight.copy_(0.2 * torch.randn(self.lora_A.weight.shape, generator=gen))
            self.lora_B.weight.copy_(0.2 * torch.randn(self.lora_B.weight.shape, generator=gen))
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


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
    ap.add_argument("--r", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=8.0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    C = a.width
    model = Gpt2(a.vocab, a.context, C, a.layers, a.heads, 4 * C)
    with torch.no_grad():
        for name, p in mixp_names(model):
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.02 * torch.randn_like(p))
    base = hf_tensors(model, "")
    for p in model.parameters():
        p.requires_grad_(False)  # the base is frozen, as PEFT freezes it
    gen = torch.Generator().manual_seed(a.seed + 1)
    adapters = {}
    for i, b in enumerate(model.blocks):
        for mixp, attr in [("attn.qkv", "qkv"), ("mlp.fc", "fc"), ("mlp.proj", "mproj")]:
            lora = LoraLinear(getattr(b, attr), a.r, a.alpha, gen)
            setattr(b, attr, lora)
            adapters[f"blocks.{i}.{mixp}"] = lora
    x = torch.randint(0, a.vocab, (a.batch, a.seq), dtype=torch.int64)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), dtype=torch.int64)
    loss = F.cross_entropy(model(x).view(-1, a.vocab), y.view(-1))
    loss.backward()

    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "model.safetensors"), base, {"format": "pt"})
    ref = {"x": x.to(torch.int32), "y": y.to(torch.int32), "loss": loss.detach().reshape(1)}
    for name, lora in adapters.items():
        for part in ("lora_A", "lora_B"):
            w = getattr(lora, part).weight
            ref[f"value.{name}.{part}.weight"] = w.detach()
            ref[f"grad.{name}.{part}.weight"] = w.grad
    write_safetensors(os.path.join(a.out, "reference.safetensors"), ref)
    print(loss.item())


if __name__ == "__main__":
    main()
