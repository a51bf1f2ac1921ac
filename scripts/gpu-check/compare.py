"""Compares what two runs of one program printed: the same text, numbers
within a relative tolerance (as tests/support/backends.rs does).

  python3 compare.py GPU_OUT CPU_OUT [REL]   -> exit 0 when they agree, else
                                                prints the first difference
"""
import re
import sys

NUMBER = re.compile(r"-?\d[\d.]*(?:[eE][-+]?\d+)?")


def tokens(text):
    out, last = [], 0
    for m in NUMBER.finditer(text):
        out.append(("text", text[last:m.start()]))
        out.append(("number", m.group()))
        last = m.end()
    out.append(("text", text[last:]))
    return out


def main():
    gpu, cpu = (open(p, encoding="utf-8", errors="replace").read() for p in sys.argv[1:3])
    rel = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-3
    a, b = tokens(gpu), tokens(cpu)
    if len(a) != len(b):
        print("different output shapes")
        return 1
    for (kind, x), (_, y) in zip(a, b):
        if kind == "text":
            if x != y:
                print(f"text differs: {x!r} vs {y!r}")
                return 1
            continue
        try:
            p, q = float(x), float(y)
        except ValueError:
            if x != y:
                print(f"{x} vs {y}")
                return 1
            continue
        if abs(p - q) > rel * max(abs(p), abs(q)) + 1e-4:
            print(f"{p} vs {q} (tolerance {rel} relative)")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
