"""Why K x K gradients are derived in index form: the cost of writing out the K^2 partials.

Expands quadratic weighted kappa for a concrete K over symbols ``C_i_j``
(:func:`metricc.analysis.matrix.expand`), differentiates it by every entry and runs ``sympy.cse`` on
the K^2 partials, as a per-K scalar emitter would; then times metricc's index-form
derivative, which is one expression for every K. ``docs/matrix.md`` quotes the figures.

    python benchmarks/matrix_expansion.py --k 4      # seconds
    python benchmarks/matrix_expansion.py            # K = 10: tens of minutes
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import sympy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import metricc
from metricc.analysis.matrix import expand, gradient


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=10)
    k = ap.parse_args(argv).k
    expr = metricc.compile("quadratic_kappa").expr
    t0 = time.perf_counter()
    f, sym = expand(expr, k)
    t1 = time.perf_counter()
    partials = [f.diff(s) for row in sym for s in row]
    t2 = time.perf_counter()
    temps, reduced = sympy.cse([f, *partials], optimizations="basic")
    t3 = time.perf_counter()
    ops = sum(sympy.count_ops(e) for _, e in temps) + sum(sympy.count_ops(e) for e in reduced)
    t4 = time.perf_counter()
    g = gradient(expr)
    t5 = time.perf_counter()
    print(f"written out for K = {k}: expand {t1 - t0:.2f} s, {k * k} partials {t2 - t1:.2f} s, "
          f"cse {t3 - t2:.2f} s, {ops} scalar operations after cse")
    print(f"index form (every K): gradient {t5 - t4:.2f} s, {sympy.count_ops(g)} operations")


if __name__ == "__main__":
    main()
