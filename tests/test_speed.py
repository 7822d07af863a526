"""The fast paths behind the loss: equal to the plain reference forms, compile-safe, cheap to build.

The figures themselves live in docs/performance.md (benchmarks/*.py); these tests pin
down that the fast code computes the same thing as the reference code, that
``torch.compile(fullgraph=True)`` traces every mode, and that the benchmark scripts run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import metricc
from metricc.runtime.counts import masked_counts, soft_counts
from metricc.runtime.options import MODES
from metricc.runtime.relax import Pair, bound_relaxation, relax, relax_grad

ROOT = Path(__file__).resolve().parents[1]


def _relax_pair(s: torch.Tensor, relaxation: str, amplifier: float, slope: float, offset: float,
                from_logits: bool) -> Pair:
    """The eager in-place ``Relaxation.pair`` of ``relaxation`` bound to these options."""
    opts = {"amplifier": amplifier, "slope": slope, "offset": offset}
    return bound_relaxation(relaxation, from_logits, opts).pair(s, from_logits)


def _relax_pair_fused(s: torch.Tensor, relaxation: str, amplifier: float, slope: float,
                      offset: float, from_logits: bool) -> Pair:
    """The compile-time ``Relaxation.pair_fused`` (run eagerly) of ``relaxation``."""
    opts = {"amplifier": amplifier, "slope": slope, "offset": offset}
    return bound_relaxation(relaxation, from_logits, opts).pair_fused(s, from_logits)

# (relaxation, from_logits) pairs the loss accepts.
RELAXATIONS = [("anyloss", False), ("anyloss", True), ("linear", False), ("linear", True),
               ("sigmoid", True)]


def _scores(from_logits: bool, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Scores covering the awkward places: 0, 1, p near 1, large logits, and ordinary ones."""
    if from_logits:
        edge = [-200.0, -40.0, -17.0, -1e-3, 0.0, 1e-3, 17.0, 40.0, 200.0]
        body = torch.linspace(-8, 8, 41, dtype=torch.float64).tolist()
    else:
        edge = [0.0, 1e-7, 0.5, 0.9, 0.999, 0.99999, 1 - 1e-7, 1.0]
        body = torch.linspace(0, 1, 41, dtype=torch.float64).tolist()
    return torch.tensor(edge + body, dtype=dtype)


@pytest.mark.parametrize(("relaxation", "from_logits"), RELAXATIONS)
@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused"])
def test_relax_pair_equals_reference(relaxation: str, from_logits: bool, fused: bool) -> None:
    """``(A, k d)`` of the eager in-place and the compile-time formulas = relax, relax_grad."""
    s = _scores(from_logits)
    args = (relaxation, 73.0, 2.5, 0.3, from_logits)
    pair = _relax_pair_fused if fused else _relax_pair
    a, d, k = pair(s.clone(), *args)
    torch.testing.assert_close(a, relax(s, *args), rtol=1e-12, atol=0)
    want = relax_grad(s, *args)
    got = torch.full_like(s, k) if d is None else k * d
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize(("relaxation", "from_logits"), RELAXATIONS)
def test_float32_derivative_is_not_flushed_where_float64_is_not(relaxation: str,
                                                                 from_logits: bool) -> None:
    """Near p = 1, ``a`` rounds to 1 in float32; ``k a (1 - a)`` would give 0 there."""
    s64 = _scores(from_logits)
    args = (relaxation, 73.0, 2.5, 0.3, from_logits)
    want = relax_grad(s64, *args)
    for pair in (_relax_pair, _relax_pair_fused):
        _, d, k = pair(s64.float(), *args)
        if d is None:
            continue
        got = (k * d).double()
        representable = want > torch.finfo(torch.float32).tiny * 2**10
        assert bool((got[representable] > 0).all()), (pair.__name__, got, want)
        torch.testing.assert_close(got[representable], want[representable], rtol=1e-4, atol=0)


def test_loss_leaves_inputs_alone_and_backward_can_run_twice() -> None:
    """The forward works in place on its own buffers only; the saved derivative survives
    a first backward (``retain_graph=True``)."""
    m = metricc.compile("mcc")
    for relaxation, from_logits in RELAXATIONS:
        loss = m.loss(relaxation, from_logits=from_logits)
        s = _scores(from_logits, torch.float32).requires_grad_(True)
        y = (torch.arange(s.numel()) % 3 == 0).float()
        w_before, y_before = s.detach().clone(), y.clone()
        out = loss(s, y)
        (g1,) = torch.autograd.grad(out, s, retain_graph=True)
        (g2,) = torch.autograd.grad(out, s)
        assert torch.equal(s.detach(), w_before) and torch.equal(y, y_before)
        torch.testing.assert_close(g1, g2, rtol=0, atol=0)


@pytest.mark.parametrize("weighted", [False, True])
def test_counts_float32_sums_match_float64(weighted: bool) -> None:
    """Pairwise float32 sums, combined in float64, agree with float64 sums to ~1e-7."""
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(3, 200_000, generator=gen)
    y = (torch.rand(3, 200_000, generator=gen) < 0.2).float()
    w = torch.rand(3, 200_000, generator=gen) if weighted else None
    got = torch.stack(soft_counts(a, y, w))
    a64, y64 = a.double(), y.double()
    w64 = torch.ones_like(a64) if w is None else w.double()
    want = torch.stack([(w64 * a64 * y64).sum(-1), (w64 * a64 * (1 - y64)).sum(-1),
                        (w64 * (1 - a64) * y64).sum(-1), (w64 * (1 - a64) * (1 - y64)).sum(-1)])
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-3)
    # The in-place variant the symbolic forward uses gives the same counts.
    inplace = torch.stack(masked_counts(a.clone(), y, w, overwrite=True))
    torch.testing.assert_close(inplace, got, rtol=0, atol=0)


def test_half_counts_are_summed_wide() -> None:
    """10^5 ones in float16 sum past float16's 65504 without overflow."""
    a = torch.ones(1, 100_000, dtype=torch.float16)
    tp, fp, fn, tn = soft_counts(a, a, None)
    assert tp.item() == 100_000 and fp.item() == 0 and fn.item() == 0 and tn.item() == 0


def _mode_batches() -> dict[str, tuple[torch.Tensor, torch.Tensor, dict[str, object]]]:
    gen = torch.Generator().manual_seed(1)
    batches = {
        "binary": (torch.randn(4, 64, generator=gen),
                   (torch.rand(4, 64, generator=gen) < 0.3).float(), {}),
        "multiclass": (torch.randn(4, 3, 16, generator=gen),
                       torch.randint(0, 3, (4, 16), generator=gen), {"average": "macro"}),
        "multilabel": (torch.randn(4, 3, 16, generator=gen),
                       (torch.rand(4, 3, 16, generator=gen) < 0.3).float(), {"average": "macro"}),
    }
    # Every mode this metricc has (binary only before modes were merged).
    return {k: v for k, v in batches.items() if k in MODES}


@pytest.mark.parametrize("mode", list(_mode_batches()))
@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_torch_compile_fullgraph_every_mode(mode: str, backward: str) -> None:
    """No graph break (``fullgraph=True`` raises on one), forward and backward traced
    through AOTAutograd; values and gradients equal eager. ``aot_eager`` skips Inductor's
    C++ build, which the next test pays for once."""
    x, target, options = _mode_batches()[mode]
    loss = metricc.compile("f1").loss(mode=mode, from_logits=True, backward=backward, **options)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager", dynamic=False)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    v1, v2 = loss(x1, target), compiled(x2, target)
    v1.backward()
    v2.backward()
    torch.testing.assert_close(v2, v1, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x2.grad, x1.grad, rtol=1e-4, atol=1e-7)


def test_torch_compile_inductor_binary_matches_eager() -> None:
    """The real thing once: Inductor fuses the loss (with the exp-sharing formulas)."""
    torch._dynamo.reset()
    loss = metricc.compile("mcc").loss(from_logits=True)
    compiled = torch.compile(loss, fullgraph=True, dynamic=False)
    gen = torch.Generator().manual_seed(2)
    x = (8 * torch.randn(5000, generator=gen, dtype=torch.float64)).requires_grad_(True)
    y = (torch.rand(5000, generator=gen) < 0.2).double()
    (g_eager,) = torch.autograd.grad(loss(x, y), x)
    (g_comp,) = torch.autograd.grad(compiled(x, y), x)
    torch.testing.assert_close(compiled(x, y), loss(x, y), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g_comp, g_eager, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("classes", [2, 5, 130])
def test_index_labels_fused_form_equals_bincount_and_scatter(
        classes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Class-index targets off the CPU's eager path (compiled, GPU): compact indices,
    counts from ``y == c`` and the backward's ``where`` = the bincount/scatter path."""
    import metricc.runtime.counts as counts
    from metricc.runtime.counts import compact_indices, index_counts

    gen = torch.Generator().manual_seed(classes)
    x = torch.randn(3, classes, 40, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (3, 40), generator=gen)
    a = torch.softmax(x, 1)
    host = torch.stack(index_counts(a, y.unsqueeze(1)))
    loss = metricc.compile("tversky", alpha=0.3, beta=0.7).loss(
        "linear", mode="multiclass", from_logits=True)
    x1 = x.clone().requires_grad_(True)
    (g_host,) = torch.autograd.grad(loss(x1, y), x1)
    monkeypatch.setattr(counts, "on_host", lambda t: False)
    small = compact_indices(y.unsqueeze(1), classes)
    assert small.dtype == (torch.int8 if classes < 127 else torch.int16)
    torch.testing.assert_close(torch.stack(index_counts(a, small)), host, rtol=1e-12, atol=1e-12)
    x2 = x.clone().requires_grad_(True)
    (g_fused,) = torch.autograd.grad(loss(x2, y), x2)
    torch.testing.assert_close(g_fused, g_host, rtol=1e-12, atol=1e-15)
    # Unchecked indices (compiled losses do not read the data) outside [0, C) count for
    # no class, also past the compact type's range, instead of wrapping onto one.
    bad = torch.tensor([[[-1, classes, 300, 70000, 0]]])
    ones = torch.ones(1, classes, 5, dtype=torch.float64)
    tp, _, fn, _ = index_counts(ones, compact_indices(bad, classes))
    assert tp[0].item() == 1 and float(tp[1:].sum()) == 0 and float((tp + fn).sum()) == 1


def test_torch_compile_inductor_multiclass_matches_eager() -> None:
    """Inductor's multiclass loss (fused index comparisons, softmax default) = eager."""
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 300, generator=gen, dtype=torch.float64).requires_grad_(True)
    y = torch.randint(0, 4, (2, 300), generator=gen)
    for relaxation in ("linear", None):
        loss = metricc.compile("dice").loss(relaxation, mode="multiclass", from_logits=True)
        compiled = torch.compile(loss, fullgraph=True, dynamic=False)
        (g_eager,) = torch.autograd.grad(loss(x, y), x)
        (g_comp,) = torch.autograd.grad(compiled(x, y), x)
        torch.testing.assert_close(compiled(x, y), loss(x, y), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(g_comp, g_eager, rtol=1e-9, atol=1e-15)


class _WhereSizes(TorchDispatchMode):
    """Records the size of every ``aten::where`` result while active (backward included)."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket is torch.ops.aten.where:
            self.sizes.append(out.numel())
        return out


@pytest.mark.parametrize("options", [{"backward": "autograd"}, {"soft_label": True}])
def test_eager_cpu_losses_select_without_where(options: dict) -> None:
    # torch's CPU where branches per element: on random conditions (the sign of a logit,
    # a < y) ~3 ns each, 20x a multiply (10x slower losses before, docs/performance.md)
    n = 4096
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=g, requires_grad=True)
    y = torch.rand(n, generator=g) if options.get("soft_label") else (x.detach() > 0.5).float()
    loss = metricc.compile("f1").loss(from_logits=True, **options)
    with _WhereSizes() as spy:
        loss(x, y).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert all(size < n for size in spy.sizes), spy.sizes


def test_analysis_is_lazy_and_cached_compile_is_cheap() -> None:
    """compile() leaves the partials for later; a repeated compile is an lru_cache hit."""
    # Parameter values no other test uses: a fresh entry in compile's cache.
    m = metricc.compile("tversky", alpha=0.3141, beta=0.2718)
    assert "gradient" not in m.analysis.__dict__
    assert metricc.compile("tversky", alpha=0.3141, beta=0.2718) is m
    t0 = time.process_time()  # CPU time: other jobs on the machine do not count
    for _ in range(1000):
        metricc.compile("tversky", alpha=0.3141, beta=0.2718)
    # ~2 microseconds a hit; a miss (SymPy again) is 10-1000 ms.
    assert (time.process_time() - t0) / 1000 < 2e-3
    grad = m.gradient
    assert set(grad) == {"TP", "FP", "FN", "TN"} and "gradient" in m.analysis.__dict__


def test_import_metricc_does_not_import_torch() -> None:
    code = "import sys, metricc; metricc.compile('f1').gradient; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("script", [
    ["bench_loss.py", "--quick", "--no-compile"],
    ["bench_compile.py", "--quick"],
    ["gpu_check.py", "--quick"],  # no CUDA here: says so, exits 0
    ["gpu_check.py", "--quick", "--device", "cpu", "--no-compile"],  # the code path itself
    ["bench_peers.py", "--quick", "--no-compile"],
    ["bench_peers.py", "--quick", "--no-compile", "--cases", "binary", "--steady-malloc"],
])
def test_benchmark_scripts_run(script: list[str]) -> None:
    """Smoke runs at tiny sizes: the scripts work and print their tables."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script[0]), *script[1:]],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    expected = {"bench_loss.py": "forward+backward", "bench_compile.py": "cold compile",
                "gpu_check.py": "CUDA", "bench_peers.py": "forward+backward"}[script[0]]
    if "--device" in script:
        expected = "all checks passed"
    if "--steady-malloc" in script:  # the re-exec'd run says so
        expected = "steady malloc"
    assert expected in out.stdout, out.stdout
