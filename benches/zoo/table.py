#!/usr/bin/env python3
"""Markdown tables from the JSON lines of benches/zoo/run.sh (standard library only).

  python benches/zoo/table.py RESULTS.jsonl

Each line is one record of `tfc bench --json` or of bench_jax.py / bench_torch.py,
tagged by run.sh with `model`, `who` (tfc, jax, torch, torch-compile) and `threads`.
Prints, per model and thread count:
  1. the training step's median ms of each runner, the fastest peer's median / tfc's
     (above 1: tfc is faster), the first call (compile) in ms and the peak RSS in MB;
  2. the losses of the first and the last step (steps 1 and 100 with run.sh's
     defaults) next to each other.
"""
import json
import sys

MODELS = ["gpt", "resnet", "lstm", "gru"]
PEERS = ["jax", "torch", "torch-compile"]
WHO = ["tfc"] + PEERS
LABEL = {"tfc": "tfc (jit)", "jax": "JAX jit", "torch": "torch eager", "torch-compile": "torch.compile"}


def load(path):
    recs = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            recs[(r["model"], r["threads"], r["who"])] = r
    return recs


def fields(r):
    """(median ms, compile ms, peak RSS MB, first loss, last loss) of a record, or None."""
    if r is None or "error" in r:
        return None
    if "step_ms" in r:  # tfc bench --json
        return r["step_ms"]["median"], r["compile_ms"], r["peak_rss_bytes"] / 2**20, r["loss_first"], r["loss_last"]
    return r["median_ms"], r["first_call_ms"], r["peak_rss_mb"], r["loss_first"], r["loss_last"]


def cell(v, fmt):
    return "-" if v is None else format(v, fmt)


def main():
    recs = load(sys.argv[1])
    threads = sorted({k[1] for k in recs})
    cols = " | ".join(LABEL[w] for w in WHO)
    print("Training step, median ms; fastest peer / tfc (above 1: tfc is faster); compile = the first call, ms;")
    print("peak RSS, MB (each runner in its own process):\n")
    print(f"| model | threads | {cols} | fastest peer / tfc | compile ms ({', '.join(WHO)}) | peak RSS MB ({', '.join(WHO)}) |")
    print("|---" * (len(WHO) + 5) + "|")
    errors = []
    for m in MODELS:
        for n in threads:
            f = {w: fields(recs.get((m, n, w))) for w in WHO}
            if not any(f.values()):
                continue
            for w in WHO:
                r = recs.get((m, n, w))
                if r and "error" in r:
                    errors.append(f"- {m}, {n} thread(s), {LABEL[w]}: {r['error']}")
            ms = {w: (v[0] if v else None) for w, v in f.items()}
            peers = [(ms[w], w) for w in PEERS if ms[w] is not None]
            ratio = "-"
            if peers and ms["tfc"]:
                best, who = min(peers)
                ratio = f"{best / ms['tfc']:.2f} ({LABEL[who]})"
            times = " | ".join(cell(ms[w], ".2f") for w in WHO)
            comp = " / ".join(cell(v[1] if v else None, ".0f") for v in f.values())
            rss = " / ".join(cell(v[2] if v else None, ".0f") for v in f.values())
            print(f"| {m} | {n} | {times} | {ratio} | {comp} | {rss} |")
    if errors:
        print("\nFailed runs:\n")
        print("\n".join(errors))

    print("\nLosses, first step / last step (steps 1 and 100 with run.sh's defaults):\n")
    print(f"| model | threads | {cols} |")
    print("|---" * (len(WHO) + 2) + "|")
    for m in MODELS:
        for n in threads:
            f = {w: fields(recs.get((m, n, w))) for w in WHO}
            if any(f.values()):
                print(f"| {m} | {n} | " + " | ".join(f"{v[3]:.7f} / {v[4]:.6g}" if v else "-" for v in f.values()) + " |")


if __name__ == "__main__":
    main()
