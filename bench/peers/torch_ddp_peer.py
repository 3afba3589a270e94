#!/usr/bin/python3
"""PyTorch DDP peer of `mpirun -np N mixp train --model gpt` (bench/dist_speed.py runs it): the
same char-level gpt (peer_models.GPT), AdamW, bf16 autocast, N processes of 1 thread on the gloo
backend, one rank's batch = global batch / N.

    /usr/bin/python3 bench/peers/torch_ddp_peer.py --ranks 2 --batch 8 --steps 20 --hook none
    /usr/bin/python3 bench/peers/torch_ddp_peer.py --ranks 2 --batch 8 --steps 20 --hook fp16

--hook none all-reduces fp32 gradients (DDP's default under autocast); fp16 registers
fp16_compress_hook (torch 1.13's bf16_compress_hook needs CUDA and NCCL). Prints one JSON object:
the median step time over the steps after --warmup. A step = forward, loss, backward (with DDP's
bucketed all-reduce), optimizer.step(), zero_grad.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def worker(rank, args, out):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    import peer_models as pm

    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    data, _ = pm.load_corpus(None)
    tokens, vocab = pm.encode_bytes(data)
    ctx = 128
    torch.manual_seed(0)
    net = pm.GPT(vocab, context=ctx)
    # The constant buffers (positions, the bool causal masks) are the same on every rank; gloo
    # cannot broadcast bool tensors ("Invalid scalar type") in torch 1.13.
    DDP._set_params_and_buffers_to_ignore_for_model(net, [n for n, _ in net.named_buffers()])
    model = DDP(net)
    if args.hook == "fp16":
        model.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(1000 + rank)
    times = []
    for step in range(args.warmup + args.steps):
        start = torch.randint(0, len(tokens) - ctx - 1, (args.batch,), generator=gen)
        x = torch.stack([tokens[s:s + ctx] for s in start])
        y = torch.stack([tokens[s + 1:s + ctx + 1] for s in start])
        dist.barrier()
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    if rank == 0:
        out.put({"peer": "torch-ddp-gloo", "ranks": args.ranks, "batch": args.batch,
                 "hook": args.hook, "torch": torch.__version__,
                 "ms_per_step": statistics.median(times), "final_loss": float(loss)})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=8, help="per rank")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--hook", choices=["none", "fp16"], default="none")
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, q)) for r in range(args.ranks)]
    for pr in procs:
        pr.start()
    result = q.get()
    for pr in procs:
        pr.join()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
