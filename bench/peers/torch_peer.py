#!/usr/bin/python3
"""PyTorch CPU peer of `mixp train`: the same models, batches and optimizer
(docs/architecture.md 5b), timed the same way.

    /usr/bin/python3 bench/peers/torch_peer.py --model mlp --precision fp32 --steps 30 --warmup 5 --json
    /usr/bin/python3 bench/peers/torch_peer.py --model mlp --epochs 2 --json      # test accuracy

One timed step = forward, loss, backward, optimizer.step(), optimizer.zero_grad(set_to_none=True).
Fetching and normalizing the batch happens before the clock starts. See README.md for the caveats.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

DEFAULTS = {  # docs/architecture.md 5b
    "mlp": {"batch": 128, "lr": 1e-3},
    "cnn": {"batch": 128, "lr": 1e-3},
    "gpt": {"batch": 16, "lr": 3e-4},
}
ADAMW_WEIGHT_DECAY = 0.01  # PyTorch's AdamW default (betas 0.9/0.999, eps 1e-8); mixp must use the same


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["mlp", "cnn", "gpt"], required=True)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                   help="bf16/fp16: torch.autocast('cpu', dtype=...) around forward+loss; weights, "
                        "gradients and optimizer stay fp32")
    p.add_argument("--steps", type=int, default=30, help="timed steps (ignored with --epochs)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before the timed ones")
    p.add_argument("--epochs", type=int, default=0,
                   help="train N full epochs instead of --steps, then evaluate (test accuracy for "
                        "mlp/cnn, held-out loss for gpt); every step is timed")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads and OMP_NUM_THREADS")
    p.add_argument("--blas-threads", type=int, default=None,
                   help="OPENBLAS_NUM_THREADS (default: the environment's value, else 1); a no-op "
                        "unless libblas.so.3 is OpenBLAS, see README")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=None, help="default: 128 (mlp, cnn), 16 (gpt)")
    p.add_argument("--lr", type=float, default=None, help="default: 1e-3 (mlp, cnn), 3e-4 (gpt)")
    p.add_argument("--data", default=None, help="folder of Fashion-MNIST IDX .gz files")
    p.add_argument("--corpus", default=None,
                   help="gpt text: a file, a folder, or 'generated' (default /usr/share/games/fortunes "
                        "if present, else generated)")
    p.add_argument("--linear-backend", choices=["blas", "onednn"], default="blas",
                   help="blas (stock): nn.Linear as torch does it (fp32 -> libblas.so.3); onednn: "
                        "nn.Linear run as a 1x1 conv so fp32 GEMMs go to oneDNN (a stronger, "
                        "non-stock fp32 baseline; see README)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--step-times", action="store_true", help="add every timed step's ms to the output")
    p.add_argument("--saved-memory", action="store_true",
                   help="after the timed steps, one more forward+loss that counts the tensors "
                        "autograd saves for backward: adds state_bytes, saved_bytes and "
                        "state_plus_saved_bytes (a lower bound of the step's tensor-memory peak, "
                        "comparable with mixp's peak_requested_bytes; RSS is not)")
    a = p.parse_args(argv)
    for name in ("steps", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    if a.warmup < 0 or a.epochs < 0:
        p.error("--warmup and --epochs must be >= 0")
    a.batch = DEFAULTS[a.model]["batch"] if a.batch is None else a.batch
    a.lr = DEFAULTS[a.model]["lr"] if a.lr is None else a.lr
    return a


def set_thread_env(args):
    """Must run before `import torch`: the OpenMP and BLAS pools read these once, at load time.
    Values already in the environment win, so a caller can override them."""
    blas = str(args.blas_threads) if args.blas_threads is not None else "1"
    if args.blas_threads is not None:
        os.environ["OPENBLAS_NUM_THREADS"] = blas
    os.environ.setdefault("OPENBLAS_NUM_THREADS", blas)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("MKL_NUM_THREADS", str(args.threads))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def saved_memory(torch, model, opt, autocast, loss_fn, batch):
    """Bytes alive at the start of backward, counted without an allocator: the persistent state
    (parameters and optimizer state; gradients are None after zero_grad(set_to_none=True)) plus every
    storage autograd saves for backward (each storage once; parameters saved as they are are
    state, their autocast copies are not). CPU torch has no allocator statistics, and RSS counts the
    interpreter and torch itself, so this is the peer of mixp's peak_requested_bytes. It omits the
    temporaries of the first backward op, so it is a lower bound of the true peak."""
    state = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    for st in opt.state.values():
        for t in st.values():
            if torch.is_tensor(t) and t.dim() > 0:
                state[t.data_ptr()] = t.numel() * t.element_size()
    saved = {}

    def pack(t):
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        nbytes = st.nbytes() if hasattr(st, "nbytes") else st.size() * t.element_size()
        saved[st.data_ptr()] = max(saved.get(st.data_ptr(), 0), nbytes)
        return t

    x, y = batch
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast():
        loss = loss_fn(model(x), y)
    del loss
    saved_bytes = sum(n for ptr, n in saved.items() if ptr not in state)
    return {"state_bytes": sum(state.values()), "saved_bytes": saved_bytes,
            "state_plus_saved_bytes": sum(state.values()) + saved_bytes}


def loaded_math_libraries():
    """The BLAS/LAPACK/oneDNN/OpenMP shared objects this process mapped. Debian's torch links
    libblas.so.3, which update-alternatives points at netlib's reference BLAS (libblas3), OpenBLAS
    (libopenblas0-*) or BLIS, whichever is installed; the fp32 GEMM speed depends on which."""
    import re
    with open("/proc/self/maps") as f:
        paths = set(re.findall(r"(/\S+\.so[.\d]*)$", f.read(), re.M))
    return sorted(os.path.realpath(p) for p in paths
                  if re.search(r"blas|lapack|blis|mkl|dnnl|gomp|iomp", os.path.basename(p)))


def main(argv):
    args = parse_args(argv)
    set_thread_env(args)

    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import peer_models as pm

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    result = {"model": args.model, "precision": args.precision, "peer": "pytorch-cpu",
              "torch_version": torch.__version__, "threads": torch.get_num_threads(),
              "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                     "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY",
                                                     "OPENBLAS_CORETYPE", "DNNL_MAX_CPU_ISA",
                                                     "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")},
              "loadavg_start": round(os.getloadavg()[0], 2),
              "batch": args.batch, "lr": args.lr, "optimizer": "adamw",
              "weight_decay": ADAMW_WEIGHT_DECAY, "seed": args.seed}

    # --- autocast: refuse clearly when this torch cannot do it (1.13 CPU autocast is bf16-only)
    amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    if amp_dtype is not None:
        try:
            with torch.autocast("cpu", dtype=amp_dtype):
                probe = torch.nn.functional.linear(torch.ones(2, 2), torch.ones(2, 2))
            if probe.dtype != amp_dtype:
                raise RuntimeError(f"autocast produced {probe.dtype}, not {amp_dtype}")
        except RuntimeError as e:
            result.update({"status": "unsupported", "reason": f"torch {torch.__version__} CPU autocast "
                           f"cannot run {args.precision}: {str(e).strip()}"})
            log(f"torch_peer: {args.model} {args.precision}: unsupported: {result['reason']}")
            print(json.dumps(result) if args.json else result["reason"])
            return 0

    def autocast():
        if amp_dtype is None:
            return torch.autocast("cpu", enabled=False)
        return torch.autocast("cpu", dtype=amp_dtype)

    # --- data and model
    if args.model in ("mlp", "cnn"):
        folder = args.data or pm.FASHION_MNIST_DIR
        tr_x, tr_y, te_x, te_y = pm.load_fashion_mnist(folder)
        tr_y, te_y = tr_y.long(), te_y.long()
        result["data"] = folder
        model = pm.MLP() if args.model == "mlp" else pm.CNN()
        n_train = tr_x.shape[0]

        def batches():  # endless reshuffled epochs; the last partial batch of an epoch is kept
            while True:
                perm = torch.randperm(n_train, generator=gen)
                for i in range(0, n_train, args.batch):
                    idx = perm[i:i + args.batch]
                    yield pm.normalize_images(tr_x[idx]), tr_y[idx]
        steps_per_epoch = (n_train + args.batch - 1) // args.batch
        samples_per_step, sample_unit = args.batch, "image"

        def loss_fn(out, y):
            return F.cross_entropy(out, y)
    else:
        data, source = pm.load_corpus(args.corpus)
        tokens, vocab = pm.encode_bytes(data)
        ctx = 128
        split = int(len(tokens) * 0.9)
        train_tok, val_tok = tokens[:split], tokens[split:]
        result.update({"corpus": source, "corpus_bytes": len(data), "vocab_size": vocab, "context": ctx})
        log(f"torch_peer: gpt corpus {source}: {len(data)} bytes, vocab {vocab}")
        model = pm.GPT(vocab, context=ctx)
        offsets = torch.arange(ctx + 1)

        def batches():  # random windows of ctx+1 tokens from the first 90%
            while True:
                start = torch.randint(0, len(train_tok) - ctx - 1, (args.batch,), generator=gen)
                w = train_tok[start[:, None] + offsets]
                yield w[:, :-1].contiguous(), w[:, 1:].contiguous()
        steps_per_epoch = max(1, len(train_tok) // (args.batch * ctx))
        samples_per_step, sample_unit = args.batch * ctx, "token"

        def loss_fn(out, y):
            return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))

    if args.linear_backend == "onednn":
        pm.linear_via_onednn(model)
    result["linear_backend"] = args.linear_backend
    result["params"] = pm.count_params(model)
    result["math_libraries"] = loaded_math_libraries()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=ADAMW_WEIGHT_DECAY)
    model.train()

    def step(x, y):
        with autocast():
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    # --- run
    if args.epochs:
        warmup, timed = 0, args.epochs * steps_per_epoch
    else:
        warmup, timed = args.warmup, args.steps
    it = batches()
    times, cpu_times, loss = [], [], None
    for i in range(warmup + timed):
        x, y = next(it)
        c0, t0 = time.process_time(), time.perf_counter()
        loss = step(x, y)
        t1, c1 = time.perf_counter(), time.process_time()
        if i >= warmup:
            times.append(t1 - t0)
            cpu_times.append(c1 - c0)
        if args.epochs and (i + 1) % steps_per_epoch == 0:
            log(f"torch_peer: epoch {(i + 1) // steps_per_epoch} loss {loss.item():.4f}")

    med, mean = statistics.median(times), statistics.fmean(times)
    result.update({
        "status": "ok", "steps": timed, "warmup_steps": warmup,
        "ms_per_step": med * 1e3, "ms_per_step_median": med * 1e3, "ms_per_step_mean": mean * 1e3,
        "ms_per_step_min": min(times) * 1e3, "ms_per_step_max": max(times) * 1e3,
        # CPU time of all the process's threads per step (median): near ms_per_step x busy threads on
        # an idle machine; spinning OpenMP threads count too. Under load, a 1-thread run's cpu_ms is
        # the better estimate of its idle-machine wall time.
        "cpu_ms_per_step": statistics.median(cpu_times) * 1e3,
        "samples_per_s": samples_per_step * len(times) / sum(times), "sample_unit": sample_unit,
        "final_loss": loss.item(),
    })
    if args.step_times:
        result["step_ms"] = [round(t * 1e3, 3) for t in times]
    if args.model == "gpt":
        result["tokens_per_s"] = result["samples_per_s"]
        result["sequences_per_s"] = args.batch * len(times) / sum(times)

    if args.saved_memory:
        result.update(saved_memory(torch, model, opt, autocast, loss_fn, next(it)))

    # --- evaluation (accuracy runs only)
    if args.epochs:
        result["epochs"] = args.epochs
        model.eval()
        with torch.no_grad(), autocast():
            if args.model in ("mlp", "cnn"):
                correct = 0
                for i in range(0, te_x.shape[0], 1000):
                    out = model(pm.normalize_images(te_x[i:i + 1000]))
                    correct += (out.argmax(1) == te_y[i:i + 1000]).sum().item()
                result["test_accuracy"] = correct / te_x.shape[0]
            else:
                nwin = (len(val_tok) - 1) // ctx
                w = val_tok[:nwin * ctx + 1]
                x, y = w[:-1].view(nwin, ctx), w[1:].view(nwin, ctx)
                result["val_loss"] = sum(loss_fn(model(x[i:i + 16]), y[i:i + 16]).item() * len(x[i:i + 16])
                                         for i in range(0, nwin, 16)) / nwin

    result["loadavg_end"] = round(os.getloadavg()[0], 2)  # 1-minute; > ~0.5 means others shared the CPU
    result["peak_rss_bytes"] = peak_rss_bytes()
    result["peak_memory_bytes"] = result["peak_rss_bytes"]  # the name `mixp train --json` uses

    if args.json:
        print(json.dumps(result))
    else:
        extra = "".join(f", {k} {result[k]:.4f}" for k in ("test_accuracy", "val_loss") if k in result)
        print(f"{args.model} {args.precision}: {result['ms_per_step']:.2f} ms/step median "
              f"({result['ms_per_step_mean']:.2f} mean) over {timed} steps, "
              f"{result['samples_per_s']:.1f} {sample_unit}s/s, final loss {result['final_loss']:.4f}"
              f"{extra}, peak RSS {result['peak_rss_bytes'] / 2**20:.0f} MiB, "
              f"{result['threads']} threads, torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
