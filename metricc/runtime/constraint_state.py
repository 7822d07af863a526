"""The state a constrained loss keeps across steps, as casts and checkpoints treat it.

:class:`ConstraintState` is the base of :class:`metricc.runtime.constrained.ConstrainedLoss`:
its ``multipliers`` stay float64 through ``.half()`` and ``.to(...)``, and its checkpoints
name their constraints, so one of other constraints is refused by name.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..errors import MetricError
from .distributed import keep_float64


class ConstraintState(torch.nn.Module):
    """Casts and checkpoints of a constrained loss's multipliers (see the module docstring).

    Subclasses hold ``constraints`` (each with ``label``, ``op``, ``bound``) and the
    float64 buffers ``multipliers`` and ``constraint_values``.
    """

    constraints: tuple[Any, ...]
    labels: tuple[str, ...]
    multipliers: Tensor
    constraint_values: Tensor
    #: The multipliers the last training step started from, for a recomputed forward
    #: (activation checkpointing); a class default for losses pickled before it existed.
    stepped_from: Tensor | None = None

    def __init__(self) -> None:
        super().__init__()
        # In the state dict's metadata, not as a key: the keys stay {"multipliers"}.
        self.register_state_dict_post_hook(record_constraints)

    def _apply(self, fn: Any, recurse: bool = True) -> ConstraintState:
        """``Module._apply`` (``.half()``, ``.to(...)``) keeping the multipliers float64, as
        the counts' memory is: a bfloat16 multiplier rounds away its small ascent steps."""
        keep_float64(self, ("multipliers", "constraint_values"), fn, recurse)
        return self

    def describe_constraints(self) -> list[str]:
        """Each constraint as ``"label op bound"``: what a checkpoint records and checks."""
        return [f"{c.label} {c.op} {c.bound!r}" for c in self.constraints]

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        """Refuse a checkpoint of other constraints with a :class:`MetricError` naming them
        (multipliers of other constraints would be applied to these silently); one written
        before checkpoints named them is compared by the number of multipliers."""
        mine = self.describe_constraints()
        theirs = local_metadata.get("constraints") if isinstance(local_metadata, dict) else None
        if theirs is not None:
            theirs = list(theirs)
            if theirs != mine:
                only_theirs = [c for c in theirs if c not in mine]
                only_mine = [c for c in mine if c not in theirs]
                what = (f"the checkpoint has {only_theirs} and this loss {only_mine}"
                        if only_theirs or only_mine else "they are in another order")
                raise MetricError(f"this checkpoint belongs to a loss with the constraints {theirs}, "
                                  f"not {mine}: {what}; load it into a loss compiled with the same "
                                  "constraints")
        else:
            lam = state_dict.get(prefix + "multipliers")
            if isinstance(lam, Tensor) and lam.dim() > 0 and lam.shape[-1] != len(mine):
                raise MetricError(f"this checkpoint holds multipliers for {lam.shape[-1]} "
                                  f"constraints, but this loss has {len(mine)}: {mine}; load it "
                                  "into a loss compiled with the same constraints")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def reset_multipliers(self) -> None:
        """Set every multiplier back to 0 (one per constraint, as at construction)."""
        self.stepped_from = None
        self.multipliers = torch.zeros(len(self.constraints), dtype=torch.float64,
                                       device=self.multipliers.device)
        self.constraint_values = torch.full_like(self.multipliers, math.nan)

    def log_dict(self) -> dict[str, float]:
        """``{"<label>": value, "multiplier/<label>": lam}`` for the single-matrix case."""
        if self.multipliers.dim() != 1:
            raise MetricError("log_dict() reports one multiplier per constraint; "
                                             "this loss holds one row per model (row_losses)")
        out: dict[str, float] = {}
        for label, h, lam in zip(self.labels, self.constraint_values.tolist(),
                                 self.multipliers.tolist(), strict=True):
            out[label] = h
            out[f"multiplier/{label}"] = lam
        return out


def record_constraints(module: ConstraintState, state_dict: Any, prefix: str,
                       local_metadata: dict[str, Any]) -> None:
    """A state-dict hook: the checkpoint names its constraints (checked on loading)."""
    local_metadata["constraints"] = module.describe_constraints()
