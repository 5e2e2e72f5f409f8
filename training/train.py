"""Trains the default Opal model (llama architecture, see model.py) on the KJV text.

Deterministic for a given --seed on one CPU thread: the window order, the
initialisation and the optimiser all draw from seeded generators.

Usage: nice -n 10 python3 train.py [--steps 1100] [--seed 1611] [--out out/model.pt]
"""
import argparse
import dataclasses
import json
import math
import os
import time

import torch
import torch.nn.functional as F

import corpus
import data
import spm
from model import Config, Llama

HERE = os.path.dirname(os.path.abspath(__file__))


def lr_at(step, steps, peak, warmup, floor):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def heldout_loss(model, stream, starts, context, batch):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(starts), batch):
        x, y = data.window_batch(stream, starts[i:i + batch], context)
        logits = model(x)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                 reduction="sum").item()
        count += y.numel()
    model.train()
    return total / count


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", default=os.path.join(HERE, "out", "vocab.json"))
    parser.add_argument("--out", default=os.path.join(HERE, "out", "model.pt"))
    parser.add_argument("--seed", type=int, default=1611)
    parser.add_argument("--steps", type=int, default=700)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--dim", type=int, default=192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    vocab = spm.Vocab.load(args.vocab)
    train_ch, held_ch = corpus.load_split()
    stream, starts = data.encode_chapters(vocab, train_ch)
    held_stream, held_starts = data.encode_chapters(vocab, held_ch)
    held_starts = held_starts[::25][:48]  # a fixed small probe; eval.py does the full text
    print(f"train stream {len(stream)} tokens, {len(starts)} verse starts", flush=True)

    cfg = Config(vocab_size=len(vocab), dim=args.dim, n_layers=args.layers,
                 n_heads=args.heads, n_kv_heads=args.kv_heads, ffn_dim=args.ffn,
                 context=args.context)
    model = Llama(cfg)
    print(f"config {cfg}, {model.n_params()} parameters", flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(starts), generator=gen)
    cursor = 0
    t0 = time.time()
    log = []
    for step in range(args.steps):
        if cursor + args.batch > len(order):
            order = torch.randperm(len(starts), generator=gen)
            cursor = 0
        x, y = data.window_batch(stream, starts[order[cursor:cursor + args.batch]], cfg.context)
        cursor += args.batch
        lr = lr_at(step, args.steps, args.lr, 50, args.lr / 20)
        for group in opt.param_groups:
            group["lr"] = lr
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 10 == 0 or step == args.steps - 1:
            entry = {"step": step, "loss": round(loss.item(), 4), "lr": round(lr, 6),
                     "elapsed_s": round(time.time() - t0, 1)}
            if step % 100 == 0 or step == args.steps - 1:
                entry["heldout_loss"] = round(heldout_loss(model, held_stream, held_starts,
                                                           cfg.context, 8), 4)
                torch.save({"config": dataclasses.asdict(cfg), "state": model.state_dict(),
                            "step": step, "seed": args.seed}, args.out)
            log.append(entry)
            print(json.dumps(entry), flush=True)
    with open(os.path.splitext(args.out)[0] + ".log.json", "w") as f:
        json.dump({"args": vars(args), "log": log, "seconds": time.time() - t0}, f, indent=1)
    print(f"done in {time.time() - t0:.0f} s -> {args.out}", flush=True)


if __name__ == "__main__":
    main()
