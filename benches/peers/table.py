"""Markdown tables from the JSON lines of benches/peers/run.sh (standard library only).

  python benches/peers/table.py RESULTS.jsonl

Each line is one record of `tfc bench --json` or of a peer's bench_*.py, tagged by
run.sh with `workload` (mlp-b64, mlp-b256, cnn-b64, sgemm) and `who` (tfc, jax, tf,
tf-xla, torch, torch-compile, numpy). Prints:
  1. the training-step medians (ms) and, per peer, tfc's median / the peer's
     (below 1: tfc is faster);
  2. SGEMM n = 1024: the median time and GFLOP/s; tfc's is its matmul step's
     median minus its control step's (see benches/peers/sgemm.tfl);
  3. the losses of step 1 and step 220 next to the peers' oracle.
"""
import json
import sys

PEERS = ["jax", "tf", "tf-xla", "torch", "torch-compile"]
LABEL = {"tfc": "tfc (jit)", "jax": "JAX jit", "tf": "TF graph", "tf-xla": "TF+XLA", "torch": "torch eager",
         "torch-compile": "torch.compile", "numpy": "numpy (OpenBLAS)"}
WORKLOADS = ["mlp-b64", "mlp-b256", "cnn-b64"]
# As the README prints it (so with its number of digits).
ORACLE = {"mlp-b64": "2.760419 / 4.551e-05", "mlp-b256": "2.603471 / 1.3525e-04", "cnn-b64": "2.402977 / 1.6407e-03"}
N = 1024


def load(path):
    recs = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            recs.setdefault((r["workload"], r["who"]), []).append(r)
    return recs


def step(r):
    """(median ms, step-1 loss, last loss) of a training record, tfc's or a peer's."""
    if "step_ms" in r:  # tfc bench --json
        return r["step_ms"]["median"], r["loss_first"], r["loss_last"]
    return r["median_ms"], r["loss_first"], r["loss_last"]


def main():
    recs = load(sys.argv[1])
    present = [p for p in PEERS if any((w, p) in recs for w in WORKLOADS)]

    print("Training step, median ms (one thread); in brackets tfc's median / the peer's:\n")
    print("| workload | " + " | ".join(LABEL[w] for w in ["tfc"] + present) + " |")
    print("|---" * (len(present) + 2) + "|")
    for w in WORKLOADS:
        t = recs.get((w, "tfc"))
        tfc_ms = step(t[0])[0] if t else None
        cells = [f"{tfc_ms:.3f}" if tfc_ms else "-"]
        for p in present:
            r = recs.get((w, p))
            if not r:
                cells.append("-")
                continue
            ms = step(r[0])[0]
            cells.append(f"{ms:.3f} ({tfc_ms / ms:.2f}x)" if tfc_ms else f"{ms:.3f}")
        print(f"| {w} | " + " | ".join(cells) + " |")

    print(f"\nSGEMM n = {N}, f32, one thread (median ms, GFLOP/s):\n")
    print("| who | median ms | GFLOP/s | tfc / this |")
    print("|---|---|---|---|")
    rows = []
    tfc = recs.get(("sgemm", "tfc"), [])
    if len(tfc) == 2:
        gemm, control = (r["step_ms"]["median"] for r in tfc)
        ms = gemm - control
        rows.append(("tfc", ms, f"tfc (jit): matmul step {gemm:.3f} − control step {control:.3f}"))
    for who in ["numpy", "jax", "tf", "torch"]:
        for r in recs.get(("sgemm", who), []):
            for s in r["sgemm"]:
                if s["n"] == N:
                    rows.append((who, s["median_ms"], f"{LABEL.get(who, who)} ({r.get('variant', '')})"))
    tfc_ms = rows[0][1] if rows and rows[0][0] == "tfc" else None
    for who, ms, label in rows:
        ratio = f"{tfc_ms / ms:.2f}x" if tfc_ms else "-"
        print(f"| {label} | {ms:.3f} | {2 * N**3 / (ms * 1e-3) / 1e9:.1f} | {ratio} |")

    print("\nLosses, step 1 / last step (step 220 with run.sh's defaults, the oracle's: ../shared/bench/README.md):\n")
    print("| workload | oracle | " + " | ".join(LABEL[w] for w in ["tfc"] + present) + " |")
    print("|---" * (len(present) + 3) + "|")
    for w in WORKLOADS:
        cells = [ORACLE[w]]
        for who in ["tfc"] + present:
            r = recs.get((w, who))
            if r:
                _, first, last = step(r[0])
                cells.append(f"{first:.7f} / {last:.4e}")
            else:
                cells.append("-")
        print(f"| {w} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
