"""The wheel carries the grammar and works from a fresh virtual environment."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_and_compiles(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # --no-isolation: the build backend (hatchling) comes from the test extra; no network needed.
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, text=True)
    (wheel,) = dist.glob("metricc-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "metricc/grammar/metric.lark" in names
    assert "metricc/py.typed" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, text=True)
    script = (
        "import metricc, pathlib, sys;"
        "assert 'site-packages' in metricc.__file__, metricc.__file__;"
        "m = metricc.compile('2*TP/(2*TP+FP+FN)');"
        "print(m.value(tp=30, fp=5, fn=10, tn=955))"
    )
    out = subprocess.run([str(py), "-c", script], cwd=tmp_path, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "0.8"

    # The console script from [project.scripts], and a standalone file written from the
    # installed wheel (the runtime modules are read from site-packages).
    metricc_bin = env_dir / "bin" / "metricc"
    grad = subprocess.run([str(metricc_bin), "grad", "f1"], cwd=tmp_path, check=True,
                          capture_output=True, text=True)
    assert grad.stdout.splitlines()[0].endswith("2*TP/(FN + FP + 2*TP)")
    subprocess.run([str(metricc_bin), "compile", "f1", "-o", "f1_loss.py"], cwd=tmp_path,
                   check=True, capture_output=True, text=True)
    assert "class F1Loss(MetricLoss):" in (tmp_path / "f1_loss.py").read_text(encoding="utf-8")
