"""Models and data for torch_peer.py: the shapes of docs/architecture.md 5b, built with stock
PyTorch modules.

Imported only after torch_peer.py has set the thread environment variables, because importing torch
fixes the OpenMP/BLAS thread pools.
"""
import gzip
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MEAN = 0.2860
FASHION_STD = 0.3530
FORTUNES_DIR = "/usr/share/games/fortunes"


# ---------------------------------------------------------------------------------------------- data

def read_idx_gz(path):
    """One IDX file (gzip): big-endian magic 0x0000 <type> <ndim>, ndim big-endian uint32 sizes, data."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data, header says {dims}")
    return data.reshape(dims)


def load_fashion_mnist(folder):
    """(train_images uint8 [60000,28,28], train_labels, test_images, test_labels) as torch tensors."""
    names = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    arrays = [read_idx_gz(os.path.join(folder, n)) for n in names]
    return tuple(torch.from_numpy(a.copy()) for a in arrays)


def normalize_images(images_u8):
    """uint8 [N,28,28] -> float32 [N,1,28,28], (x/255 - mean)/std."""
    x = images_u8.to(torch.float32).div_(255.0)
    return x.sub_(FASHION_MEAN).div_(FASHION_STD).unsqueeze(1)


def load_corpus(path):
    """Bytes of the corpus: a file, or every regular non-.dat file of a folder (symlinks skipped, since
    Debian's fortunes folder holds NAME.u8 -> NAME links). Falls back to a generated corpus."""
    if path is None:
        path = FORTUNES_DIR if os.path.isdir(FORTUNES_DIR) else None
    if path is None or path == "generated":
        return generated_corpus(), "generated"
    if os.path.isdir(path):
        blobs = []
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            if name.endswith(".dat") or os.path.islink(full) or not os.path.isfile(full):
                continue
            with open(full, "rb") as f:
                blobs.append(f.read())
        data = b"".join(blobs)
    else:
        with open(path, "rb") as f:
            data = f.read()
    if len(data) < 10_000:
        raise ValueError(f"corpus {path} has only {len(data)} bytes; need at least 10000")
    return data, path


def generated_corpus(n_bytes=200_000, seed=1234):
    """Deterministic pseudo-text: words drawn from a small vocabulary, so that a model can learn it."""
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "its", "home", "while",
             "birds", "sang", "in", "trees", "of", "green", "light", "rain", "fell", "softly", "."]
    out, size = [], 0
    while size < n_bytes:
        w = words[rng.integers(len(words))]
        out.append(w)
        size += len(w) + 1
    return (" ".join(out) + "\n").encode()


def encode_bytes(data):
    """Vocabulary = the distinct byte values of the corpus, mapped to 0..V-1 in byte order."""
    arr = np.frombuffer(data, dtype=np.uint8)
    vocab = np.unique(arr)
    lut = np.zeros(256, dtype=np.int64)
    lut[vocab] = np.arange(len(vocab))
    return torch.from_numpy(lut[arr]), len(vocab)


# --------------------------------------------------------------------------------------------- models

class MLP(nn.Module):
    """784-512-512-10, ReLU."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                                 nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    """conv 1->32 3x3 p1, BN, ReLU, maxpool 2; conv 32->64 3x3 p1, BN, ReLU, maxpool 2;
    linear 3136->128, ReLU; linear 128->10."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.net(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        mask = torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        hd = c // self.heads
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, width, heads, context, mlp_width):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_width), nn.GELU(approximate="tanh"),
                                 nn.Linear(mlp_width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Char-level decoder: token + learned position embeddings, pre-LN blocks, final LN, untied head
    (no bias). Linear layers have biases, no dropout; weights N(0, 0.02), biases 0 (GPT-2 style)."""

    def __init__(self, vocab, layers=4, width=256, heads=4, context=128, mlp_width=1024):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, context, mlp_width) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.register_buffer("positions", torch.arange(context), persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(self.positions[:t])
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def count_params(model):
    return sum(p.numel() for p in model.parameters())


class ConvLinear(nn.Linear):
    """nn.Linear computed as a 1x1 convolution. Debian's torch 1.13 sends fp32 matmul to libblas.so.3
    (here netlib's reference BLAS, ~4 GFLOP/s) but fp32 convolution to oneDNN, so this shows what
    PyTorch's fp32 step would cost with a real GEMM. Same parameters, same math; not stock behaviour."""

    def forward(self, x):
        lead = x.shape[:-1]
        x4 = x.reshape(-1, self.in_features, 1, 1)
        y = F.conv2d(x4, self.weight.view(self.out_features, self.in_features, 1, 1), self.bias)
        return y.view(*lead, self.out_features)


def linear_via_onednn(model):
    """Switch every nn.Linear of model to ConvLinear in place (parameters untouched)."""
    for m in model.modules():
        if type(m) is nn.Linear:
            m.__class__ = ConvLinear
    return model
