"""The constrained loss's defaults (one place, the user's options win) and its stall warning."""

from __future__ import annotations

import math
import pickle
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from script_loader import load_script

import metricc
from metricc.errors import MetricWarning
from metricc.runtime.constraint_defaults import CONSTRAINED_DEFAULTS, STALL_STEPS

CONSTRAINED = "precision subject to recall >= 0.8"


def test_defaults_come_from_one_place_and_explicit_options_win() -> None:
    m = metricc.compile(CONSTRAINED)
    loss = m.loss(from_logits=True)
    assert loss.objective.relax.amplifier == CONSTRAINED_DEFAULTS["amplifier"] == 10.0
    for key in ("multiplier_lr", "penalty", "max_multiplier", "multiplier_rates"):
        assert getattr(loss, key) == CONSTRAINED_DEFAULTS[key]
    assert "amplifier=10.0" in repr(loss) and "multiplier_lr=0.2" in repr(loss)
    mine = m.loss(from_logits=True, amplifier=73, multiplier_lr=0.05, penalty=0.0)
    assert (mine.objective.relax.amplifier, mine.multiplier_lr, mine.penalty) == (73.0, 0.05, 0.0)
    # unconstrained losses keep their own default
    assert metricc.compile("precision").loss().relax.amplifier == 73.0


def _steps(loss: torch.nn.Module, scores: torch.Tensor, y: torch.Tensor, n: int
           ) -> tuple[list[int], list[str]]:
    """``n`` training steps on fixed scores (a model that cannot move): the steps that warned
    and their messages."""
    fired, messages = [], []
    for step in range(n):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            s = scores.clone().requires_grad_(True)
            loss(s, y).backward()
        for w in seen:
            if issubclass(w.category, MetricWarning):
                fired.append(step)
                messages.append(str(w.message))
    return fired, messages


def _stuck_case() -> tuple[torch.Tensor, torch.Tensor]:
    # 10 positives, half of them scored below 0.5: recall stays 0.5 against a 0.8 target
    y = torch.tensor([1.0] * 10 + [0.0] * 30)
    p = torch.tensor([0.9] * 5 + [0.1] * 5 + [0.2] * 30)
    return torch.logit(p), y


def test_stall_warns_once_after_the_stated_steps_naming_what_to_change() -> None:
    s, y = _stuck_case()
    loss = metricc.compile(CONSTRAINED).loss(from_logits=True, amplifier=73.0, multiplier_lr=0.05)
    fired, (msg, *_) = _steps(loss, s, y, STALL_STEPS + 200)
    # the violation (0.3) lifts the average over 0.02 within a few steps; 400 steps later it warns
    assert len(fired) == 1 and STALL_STEPS <= fired[0] < STALL_STEPS + 10, fired
    assert "'recall >= 0.8' violated for 400 steps (0/1 value 0.5 at probability 0.5)" in msg
    assert "try amplifier=10 and multiplier_lr=0.2" in msg
    assert "m.check()" in msg and "BestFeasible" in msg


def test_stall_at_the_defaults_suggests_the_next_settings() -> None:
    s, y = _stuck_case()
    loss = metricc.compile(CONSTRAINED).loss(from_logits=True)
    fired, messages = _steps(loss, s, y, STALL_STEPS + 20)
    assert len(fired) == 1 and "try a smaller amplifier (5) or a larger penalty (5)" in messages[0]


def test_no_warning_when_the_constraint_is_met_or_outside_training_steps() -> None:
    y = torch.tensor([1.0] * 10 + [0.0] * 30)
    met = torch.logit(torch.tensor([0.9] * 9 + [0.1] + [0.2] * 30))  # recall 0.9 >= 0.8
    loss = metricc.compile(CONSTRAINED).loss(from_logits=True)
    assert _steps(loss, met, y, STALL_STEPS + 50) == ([], [])
    s, _ = _stuck_case()
    loss = metricc.compile(CONSTRAINED).loss(from_logits=True)
    loss.eval()  # validation passes do not step the multipliers, so nothing stalls
    assert _steps(loss, s, y, STALL_STEPS + 50) == ([], [])


def test_stall_state_survives_casts_and_pickling() -> None:
    s, y = _stuck_case()
    loss = metricc.compile(CONSTRAINED).loss(from_logits=True)
    _steps(loss, s, y, 100)
    before = loss.stall.state.clone()
    loss.half().float()
    assert loss.stall.state.dtype == torch.float64 and torch.equal(loss.stall.state, before)
    again = pickle.loads(pickle.dumps(loss))
    assert torch.equal(again.stall.state, before) and again.stall.steps == 100
    # one that never stepped (as losses pickled before the watch existed) starts a watch
    fresh = pickle.loads(pickle.dumps(metricc.compile(CONSTRAINED).loss(from_logits=True)))
    assert fresh.stall is None
    assert _steps(fresh, s, y, 3) == ([], []) and fresh.stall.steps == 3


def test_stall_watch_follows_each_row() -> None:
    s, y = _stuck_case()
    met = torch.logit(torch.tensor([0.9] * 9 + [0.1] + [0.2] * 30))
    loss = metricc.compile(CONSTRAINED).loss(from_logits=True)
    fired = []
    for step in range(STALL_STEPS + 20):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            x = torch.stack([met, s]).requires_grad_(True)
            loss.row_losses(x, torch.stack([y, y])).sum().backward()
        fired += [step for w in seen if issubclass(w.category, MetricWarning)]
    # the stuck row warns (once), the one meeting its constraint does not
    assert len(fired) == 1 and loss.stall.state.shape == (2, 1, 3)
    assert loss.stall.state[0, 0, 1] == 0 and loss.stall.state[1, 0, 1] >= STALL_STEPS


def test_fullgraph_compile_skips_the_watch() -> None:
    """The watch is Python-side state: under ``torch.compile(fullgraph=True)`` it is skipped,
    not a graph break; the multiplier steps still happen."""
    s, y = _stuck_case()
    loss = metricc.compile(CONSTRAINED).loss(from_logits=True)
    compiled = torch.compile(loss, fullgraph=True, backend="eager")
    for _ in range(3):
        compiled(s.clone().requires_grad_(True), y).backward()
    assert loss.stall is None
    assert loss.multipliers.item() == pytest.approx(3 * CONSTRAINED_DEFAULTS["multiplier_lr"] * 0.3)


def test_best_feasible_pass_smoke_run(tmp_path: Path) -> None:
    """``benchmarks/constrained_defaults.py --feasible --quick``: every epoch's whole fit set
    judged by one BestFeasible per run, without changing the training."""
    cd = load_script(Path("benchmarks/constrained_defaults.py"))
    runs_csv, passes_csv = tmp_path / "feasible.csv", tmp_path / "passes.csv.gz"
    assert cd.main(["--feasible", "--quick", "--feasible-runs", str(runs_csv),
                    "--passes", str(passes_csv)]) == 0
    runs, passes = cd._read(runs_csv), cd._read(passes_csv)
    assert sorted(r["case"] for r in runs) == ["keel"] * 4 + ["synthetic"]  # 2 targets x 2 folds
    key = ("case", "set", "fold", "seed", "target")
    for run in runs:
        epochs = sorted((p for p in passes if all(p[k] == run[k] for k in key)),
                        key=lambda p: int(p["epoch"]))
        assert [int(p["epoch"]) for p in epochs] == [1, 2, 3]
        for p in epochs:
            assert all(0.0 <= float(p[k]) <= 1.0 for k in ("recall", "precision", "pred_pos"))
            # held out: KEEL's validation part (recorded only); the synthetic case has none
            held = [float(p[k]) for k in ("held_recall", "held_precision")]
            assert all(0.0 <= h <= 1.0 for h in held) if run["case"] == "keel" else \
                all(math.isnan(h) for h in held)
            assert int(p["feasible"]) == (float(p["recall"]) >= float(p["target"]))
            assert int(p["met"]) == (int(p["feasible"]) and float(p["precision"])
                                     >= cd.COLLAPSE_RATIO * float(run["base_rate"]) - 1e-5)
        # the final model is the last epoch's: its judged pass is the run's final rates
        assert float(epochs[-1]["recall"]) == pytest.approx(float(run["fit_recall"]), abs=1e-5)
        feasible = [p for p in epochs if int(p["feasible"])]
        met = [p for p in epochs if int(p["met"])]
        assert int(run["first_met"]) == (int(met[0]["epoch"]) if met else 0)
        assert int(run["latest_met_epoch"]) == (int(met[-1]["epoch"]) if met else 0)
        assert int(run["latest_feasible_epoch"]) == (int(feasible[-1]["epoch"]) if feasible else 0)
        assert int(run["final_met"]) == (float(run["fit_recall"]) >= float(run["target"]) and
                                         int(epochs[-1]["met"]))
        assert (int(run["kept_epoch"]) > 0) == bool(feasible)
        if feasible:  # kept: the best training precision among the feasible epochs
            kept = next(p for p in epochs if int(p["epoch"]) == int(run["kept_epoch"]))
            assert int(kept["feasible"]) == 1
            assert float(kept["precision"]) == max(float(p["precision"]) for p in feasible)
            assert float(run["kept_recall"]) >= float(run["target"])
            assert int(run["kept_met"]) == (float(run["kept_precision"])
                                           >= cd.COLLAPSE_RATIO * float(run["base_rate"]))
    # judging every epoch leaves the training as it was
    harness = replace(cd.ct.Config(), epochs=3, folds=2, seeds=(0,))
    plain = cd.run_keel(cd.CHOSEN, ["glass0"], harness)
    judged = cd.run_keel(cd.CHOSEN, ["glass0"], harness, passes=[])
    assert [{k: r[k] for k in p} for p, r in zip(plain, judged, strict=True)] == plain
    page = tmp_path / "page.md"
    shutil.copy(cd.RESULTS / "constrained_defaults_runs.csv", tmp_path / "runs.csv")
    assert cd.main(["--report", "--runs", str(tmp_path / "runs.csv"), "--feasible-runs",
                    str(runs_csv), "--page", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert cd.FEASIBLE_TITLE in text and f"| `{cd.CHOSEN.tag}` | keel | glass0 | 4 |" in text
