"""The wheel carries the grammar and works from a fresh virtual environment."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _dependency_dirs() -> list[str]:
    """Where the *running* interpreter keeps its packages (torch, sympy, lark, numpy).

    A venv made with ``system_site_packages=True`` would see the base interpreter's packages instead,
    which is whatever Python the test venv was made from, not the test venv itself.
    """
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if Path(d).resolve() != ROOT]


def _clean_env() -> dict[str, str]:
    """No PYTHONPATH: the checkout's own ``metricc`` must not be importable in the child."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


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

    # An isolated venv; the running interpreter's dependency directories are appended to its
    # sys.path by a .pth file. Plain directory lines: .pth files inside them (an editable install
    # of this checkout, for one) are not processed, so only the wheel can provide `metricc`.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=False, with_pip=True)
    py = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    env = _clean_env()
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True, env=env).stdout.strip()
    Path(purelib, "zz_test_dependencies.pth").write_text("\n".join(_dependency_dirs()) + "\n", encoding="utf-8")
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, text=True, env=env)
    script = (
        "import metricc, pathlib, sys;"
        "print(pathlib.Path(metricc.__file__).resolve());"
        "m = metricc.compile('2*TP/(2*TP+FP+FN)');"
        "print(m.value(tp=30, fp=5, fn=10, tn=955))"
    )
    out = subprocess.run([str(py), "-c", script], cwd=tmp_path, check=True, capture_output=True, text=True,
                         env=env)
    where, value = out.stdout.split()
    assert Path(where).is_relative_to(Path(purelib).resolve()), where  # the wheel's copy, not the checkout
    assert value == "0.8"

    # The console script from [project.scripts], and a standalone file written from the
    # installed wheel (the runtime modules are read from site-packages).
    metricc_bin = py.with_name("metricc")
    grad = subprocess.run([str(metricc_bin), "grad", "f1"], cwd=tmp_path, check=True,
                          capture_output=True, text=True, env=env)
    assert grad.stdout.splitlines()[0].endswith("2*TP/(FN + FP + 2*TP)")
    subprocess.run([str(metricc_bin), "compile", "f1", "-o", "f1_loss.py"], cwd=tmp_path,
                   check=True, capture_output=True, text=True, env=env)
    assert "class F1Loss(MetricLoss):" in (tmp_path / "f1_loss.py").read_text(encoding="utf-8")
    # The standalone file needs torch only: it runs in the same clean environment.
    run = subprocess.run([str(py), "-c", "import f1_loss, torch; print(type(f1_loss.F1Loss()).__name__)"],
                         cwd=tmp_path, check=True, capture_output=True, text=True, env=env)
    assert run.stdout.strip() == "F1Loss"
