"""``WarmStart``: cross-entropy first, then a linear blend into a metric loss.

A metric loss gives a weak gradient to a model whose scores are still random: a curve loss
(AUROC, AP) moves only pairs of scores that the soft curve's grid tells apart, and a small
model starting from a constant output gets almost none. The usual recipe (LibAUC's and
imbalanced-losses' examples pretrain with cross-entropy for this reason) is to train with
cross-entropy first. :class:`WarmStart` holds that schedule: cross-entropy alone for
``warmup_steps`` training steps, a linear blend over ``blend_steps``, then the metric loss
(plus ``keep`` times the cross-entropy). The cross-entropy reads the input as the wrapped
loss does (its ``mode``, ``from_logits`` and ``ignore_index``). Torch-only, pasted last into
standalone files.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import MetricError
from .constrained import ConstrainedLoss
from .counts import wide_dtype
from .distributed import recomputing, updates_state
from .loss_base import StatisticLoss
from .modes import BINARY, Mode, look_up_mode, single_channel, validate_inputs
from .options import check_flag, check_integer, check_number, look_up_option

#: The cross-entropies ``base`` names (which modes each one reads is ``Mode.cross_entropy``).
BASES = ("bce", "ce")
#: The phases of the schedule, in order.
PHASES = ("warmup", "blend", "metric")


class InputReading(NamedTuple):
    """How a loss reads its ``(input, target)``: what the cross-entropy must follow."""

    mode: Mode
    from_logits: bool
    ignore_index: int | None
    validate_args: bool


def input_reading(loss: torch.nn.Module, mode: str | None, from_logits: bool | None
                  ) -> InputReading | None:
    """The wrapped loss's reading of its inputs; ``mode`` and ``from_logits`` are read from a
    metricc loss (and must agree with it when given), or given for any other module (else
    ``None``: a module ``base`` then needs no reading)."""
    if isinstance(loss, ConstrainedLoss):
        obj = loss.objective
        own = InputReading(BINARY, obj.from_logits, obj.ignore_index, obj.validate_args)
    elif isinstance(loss, StatisticLoss):  # every statistic's loss: its mode (K x K: multiclass)
        own = InputReading(loss.mode, loss.from_logits, loss.ignore_index, loss.validate_args)
    else:
        if mode is None or from_logits is None:
            return None
        return InputReading(look_up_mode(mode),
                            check_flag("from_logits", from_logits), None, True)
    for name, given in (("mode", mode), ("from_logits", from_logits)):
        if given is not None and given != getattr(own, name):
            raise MetricError(f"{name}={given!r} disagrees with the wrapped loss, which reads "
                              f"its input with {name}={getattr(own, name)!r}; leave {name} out "
                              "(WarmStart follows the loss)")
    return own


def _weighted_mean(terms: Tensor, w: Tensor | None) -> Tensor:
    """``sum(w * terms) / sum(w)``: integer weights equal repeating the elements; ``0`` when
    every weight is 0."""
    if w is None:
        return terms.mean()
    w = w.to(terms.dtype).expand_as(terms)
    return (w * terms).sum() / w.sum().clamp_min(torch.finfo(terms.dtype).tiny)


def cross_entropy(input: Tensor, target: Tensor, reading: InputReading,
                  weight: Tensor | None = None) -> Tensor:
    """The cross-entropy of ``input`` against ``target`` read as ``reading`` says, averaged
    over the elements (a weighted mean with ``weight``; elements whose target is
    ``ignore_index`` are left out).

    Binary and multilabel: ``binary_cross_entropy_with_logits`` (``from_logits``) or
    ``binary_cross_entropy`` on probabilities, per element. Multiclass: ``cross_entropy`` of
    logits (or the log of probabilities) against class indices ``(N, *)`` or soft labels
    ``(N, C, *)`` (then a weight may vary by class: each class's term is weighed, over the
    weighted label mass). Without weight or ``ignore_index`` these are torch's own means.

    >>> x, y = torch.tensor([2.0, -1.0]), torch.tensor([1.0, 0.0])
    >>> r = InputReading(BINARY, True, None, True)
    >>> bool(cross_entropy(x, y, r) == F.binary_cross_entropy_with_logits(x, y))
    True
    """
    work = wide_dtype(input.dtype)
    x = input.to(work)
    if weight is not None and weight.dim() == 1 and target.dim() > 1 \
            and weight.shape[0] == target.shape[0]:
        weight = weight.view(-1, *(1,) * (target.dim() - 1))  # one weight per sample
    ii = reading.ignore_index
    if not reading.mode.exclusive:
        if not reading.mode.class_dim and single_channel(x, target):
            x = x.squeeze(1)
        y = target.to(work)
        keep = None if ii is None else target != ii
        if keep is not None:
            y = torch.where(keep, y, 0.0)
        bce = F.binary_cross_entropy_with_logits if reading.from_logits else F.binary_cross_entropy
        if weight is None and keep is None:
            return bce(x, y)
        w = weight if keep is None else keep if weight is None else weight * keep
        assert w is not None  # a weight or a mask, or the branch above returned
        return _weighted_mean(bce(x, y, reduction="none"), torch.broadcast_to(w, y.shape))
    logp = torch.log_softmax(x, 1) if reading.from_logits else torch.log(
        x.clamp_min(torch.finfo(work).tiny))
    if target.shape == input.shape:  # one-hot or soft labels (N, C, *)
        y = target.to(work)
        if weight is None:
            return F.cross_entropy(x, y) if reading.from_logits else -(y * logp).sum(1).mean()
        wy = torch.broadcast_to(weight.to(work), y.shape) * y
        return -(wy * logp).sum() / wy.sum().clamp_min(torch.finfo(work).tiny)
    index = -100 if ii is None else ii
    if weight is None:
        if reading.from_logits:
            return F.cross_entropy(x, target, ignore_index=index)
        return F.nll_loss(logp, target, ignore_index=index)
    terms = F.nll_loss(logp, target, ignore_index=index, reduction="none")
    w = torch.broadcast_to(weight, target.shape)
    return _weighted_mean(terms, w if ii is None else w * (target != ii))


def blend_weight(step: int, warmup_steps: int, blend_steps: int) -> float:
    """The metric loss's share ``a`` at training step ``step`` (counted from 0): 0 for the
    first ``warmup_steps`` steps, then ``(i + 1) / (blend_steps + 1)`` at the ``i``-th step of
    the blend (no blend step is all cross-entropy or all metric), then 1.

    >>> [blend_weight(s, 2, 3) for s in range(7)]
    [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    """
    return min(max((step - warmup_steps + 1) / (blend_steps + 1), 0.0), 1.0)


class WarmStart(torch.nn.Module):
    """Cross-entropy for ``warmup_steps`` training steps, then a linear blend into ``loss``.

    ``forward(input, target, **kw)`` returns, at training step ``s`` (counted from 0) with
    ``a = blend_weight(s, warmup_steps, blend_steps)``::

        (1 - a + a * keep) * CE + a * loss(input, target, **kw)

    so cross-entropy alone while ``a = 0`` (the metric loss is not called), a linear blend
    over ``blend_steps`` steps, then the metric loss plus ``keep`` times the cross-entropy
    (the cross-entropy is not computed when ``keep = 0``). ``loss`` is any metricc loss (2 x 2
    ``MetricLoss``, ``ConstrainedLoss``, K x K ``MatrixLoss``, curve ``CurveLoss``) or another
    module returning a scalar. ``base``: ``"bce"`` (binary and multilabel inputs), ``"ce"``
    (multiclass), ``None`` (the one the loss's ``mode`` reads: :func:`cross_entropy`, which
    follows the loss's ``from_logits`` and ``ignore_index`` and takes ``weight=``), or a
    module called as ``base(input, target, **kw)``. ``mode`` and ``from_logits`` are read
    from a metricc loss; give them only for another module with a string ``base``.

    The step advances once per forward in a training step (the module in training mode with
    gradients enabled, the rule of the losses' memory): never under ``eval()``, ``no_grad``,
    ``inference_mode`` or activation checkpointing's recomputation. It is the buffer
    ``steps`` of the ``state_dict`` (with the wrapped loss's own state, under ``loss.``), so a
    checkpoint resumes the schedule where it stopped; pickling and ``torch.save`` keep it.
    Under ``torch.compile`` the weights are formed from the buffer as tensors (no graph
    break, no recompilation per step), and both terms run at every step: a zero weight
    multiplies the unused one, whose own state (memory, multipliers) then also moves during
    the warm-up.

    >>> import metricc
    >>> loss = metricc.compile("auroc").loss(from_logits=True)
    >>> warm = metricc.WarmStart(loss, warmup_steps=2, blend_steps=1)
    >>> x, y = torch.tensor([2.0, -1.0, 0.5]), torch.tensor([1.0, 0.0, 0.0])
    >>> bool(warm(x, y) == torch.nn.functional.binary_cross_entropy_with_logits(x, y))
    True
    >>> [warm.phase, int(warm.steps)]
    ['warmup', 1]
    >>> _ = warm(x, y); _ = warm(x, y)   # the last warm-up step, then the blend (a = 1/2)
    >>> [warm.phase, int(warm.steps)]
    ['metric', 3]
    >>> bool(warm(x, y) == loss(x, y))
    True
    """

    steps: Tensor

    def __init__(self, loss: torch.nn.Module, *, warmup_steps: int, blend_steps: int,
                 base: str | torch.nn.Module | None = None, keep: float = 0.0,
                 mode: str | None = None, from_logits: bool | None = None) -> None:
        super().__init__()
        if not isinstance(loss, torch.nn.Module):
            raise MetricError(f"WarmStart wraps a loss module (a metricc loss: metric.loss()), "
                              f"got {type(loss).__name__}")
        for name in ("reduction", "average"):
            if getattr(loss, name, None) == "none":
                raise MetricError(f"WarmStart blends one number per batch, but the loss has "
                                  f"{name}='none'; use 'mean' (or 'macro')")
        self.warmup_steps, self.blend_steps = (_count(n, v) for n, v in (
            ("warmup_steps", warmup_steps), ("blend_steps", blend_steps)))
        self.keep = check_number("keep", keep)
        if self.keep > 1:
            raise MetricError(f"keep is the share of cross-entropy kept after the blend, in "
                              f"[0, 1], got {keep!r}")
        self.reading = input_reading(loss, mode, from_logits)
        self.loss = loss
        if isinstance(base, torch.nn.Module):
            self.base: torch.nn.Module | None = base
            self.base_name = type(base).__name__
        else:
            self.base = None
            self.base_name = self._base_name(base)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self._host: tuple[Tensor, int, int] | None = None  # (buffer, its version, its value)

    def _base_name(self, base: Any) -> str:
        if base is not None:
            look_up_option("base", base, BASES)
        if self.reading is None:
            raise MetricError(f"a {type(self.loss).__name__} is no metricc loss: give mode= "
                              "and from_logits= (how the cross-entropy reads the input), or a "
                              "module as base=")
        name = base or self.reading.mode.cross_entropy
        if name != self.reading.mode.cross_entropy:
            other = "ce" if name == "bce" else "bce"
            raise MetricError(f"base={name!r} does not read mode={self.reading.mode!r} inputs; "
                              f"use base={other!r} (or leave base out)")
        return name

    def extra_repr(self) -> str:
        return (f"warmup_steps={self.warmup_steps}, blend_steps={self.blend_steps}, "
                f"base={self.base_name!r}, keep={self.keep}")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_host"] = None  # a reference to the buffer, re-read after unpickling
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        reading = state.get("reading")
        if reading is not None:  # the mode pickles as its name: its object again
            self.reading = reading._replace(mode=look_up_mode(reading.mode))

    def step_count(self) -> int:
        """The training steps taken so far (the buffer ``steps``, read on the host: cached
        while the buffer is unchanged, so an eager step costs no device sync)."""
        host = self._host
        if host is None or host[0] is not self.steps or host[1] != self.steps._version:
            host = self._host = (self.steps, self.steps._version, int(self.steps))
        return host[2]

    def weights(self, step: int | None = None) -> tuple[float, float]:
        """``(cross-entropy weight, metric weight)`` at ``step`` (default: the next one)."""
        a = blend_weight(self.step_count() if step is None else _count("step", step),
                         self.warmup_steps, self.blend_steps)
        return 1 - a + a * self.keep, a

    @property
    def phase(self) -> str:
        """``"warmup"``, ``"blend"`` or ``"metric"``: the phase of the next training step."""
        s = self.step_count()
        if s < self.warmup_steps:
            return "warmup"
        return "blend" if s < self.warmup_steps + self.blend_steps else "metric"

    def reset_memory(self) -> None:
        """The wrapped loss's ``reset_memory()`` (a no-op for a loss without one)."""
        reset = getattr(self.loss, "reset_memory", None)
        if callable(reset):
            reset()

    def cross_entropy(self, input: Tensor, target: Tensor, **kw: Any) -> Tensor:
        """The ``base`` term alone, as the forward forms it."""
        if self.base is not None:
            return self.base(input, target, **kw)
        r = self.reading
        assert r is not None  # a string base needs a reading (checked in __init__)
        target = target.detach()
        validate_inputs(input, target, r.mode, r.from_logits, r.ignore_index, r.validate_args)
        return cross_entropy(input, target, r, kw.get("weight"))

    def forward(self, input: Tensor, target: Tensor, **kw: Any) -> Tensor:
        """The scheduled loss; ``kw`` (``weight=``) goes to both terms."""
        if torch.compiler.is_compiling():
            return self._traced(input, target, kw)
        training = updates_state(self) and not recomputing()
        s = self.step_count()
        ce_w, a = self.weights(s)
        if a == 0:
            out = self.cross_entropy(input, target, **kw)
        else:
            out = self.loss(input, target, **kw)
            if out.dim() != 0:
                raise MetricError(f"WarmStart blends one number per batch, but the loss "
                                  f"returned shape {tuple(out.shape)}")
            if ce_w != 0:
                out = ce_w * self.cross_entropy(input, target, **kw) + a * out
        if training:
            self.steps.add_(1)
            self._host = (self.steps, self.steps._version, s + 1)
        return out

    def _traced(self, input: Tensor, target: Tensor, kw: dict[str, Any]) -> Tensor:
        """The forward while ``torch.compile`` traces: weights from the buffer, both terms."""
        ce = self.cross_entropy(input, target, **kw)
        m = self.loss(input, target, **kw)
        s = self.steps.to(ce.dtype)
        a = ((s - self.warmup_steps + 1) / (self.blend_steps + 1)).clamp(0.0, 1.0)
        out = (1 - a + a * self.keep) * ce + a * m
        if updates_state(self):
            self.steps.add_(1)
        return out


def _count(name: str, value: Any) -> int:
    n = check_integer(name, value)
    if n < 0:
        raise MetricError(f"{name} must be a whole number of training steps >= 0, got {value!r}")
    return n

