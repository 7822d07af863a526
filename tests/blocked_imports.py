"""The opening of a child script that runs generated standalone files where metricc, sympy and
lark cannot be imported (as in an image with torch only): it blocks them with a meta-path
finder, imports torch, and records in ``blocked`` which of them it could not import. The
tests that run standalone files (``test_standalone.py``, ``test_seam_behaviour.py``) append
their own jobs to it; each checks ``blocked`` and that none of them leaked into ``sys.modules``.
"""

PRELUDE = r'''
import importlib.util, inspect, json, sys

BLOCKED = {"metricc", "sympy", "lark"}


class Blocker:
    """Makes importing metricc, sympy or lark fail, as in an image without them."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed here")
        return None


sys.meta_path.insert(0, Blocker())
import torch

blocked = []
for name in sorted(BLOCKED):
    try:
        __import__(name)
    except ImportError:
        blocked.append(name)
'''
