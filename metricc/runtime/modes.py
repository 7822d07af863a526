"""Modes as objects: validate, then lay out a batch as ``(N, K, M)`` rows.

One :class:`Mode` per mode (:data:`BINARY`, :data:`MULTICLASS`, :data:`MULTILABEL`), a ``str``
subclass equal to its name, carrying what code once decided by comparing names (a class dim?
exclusive classes? the default relaxation and cross-entropy) and its ``validate`` stage; its
``_<mode>_format`` stage (one pair per mode, as torchmetrics' ``stat_scores`` has them) is
picked by those attributes. :func:`look_up_mode`
turns the user's string into its object once, at the API boundary; the loss then runs
:func:`validate_inputs` and :func:`class_rows`. How the rows' losses are averaged is in ``averages``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from ..errors import MetricError
from .counts import compact_indices
from .hints import (
    label_error,
    multilabel_validate,
    warn_if_ignore_drops_positives,
    warn_if_probabilities,
)
from .options import MODES, look_up_option, select_classes


class ClassRows(NamedTuple):
    """Scores, labels and masks of a batch laid out as ``(N, K, M)``.

    ``K`` is the number of selected classes (1 in binary mode), ``M`` the
    number of elements per sample and class. ``y`` holds the labels, or, for
    multiclass class-index targets when the caller allows it, the indices
    themselves as ``(N, 1, M)`` int64 (see ``counts._index_counts``). ``mask``
    (``(N, 1 or K, M)``, ``None`` without ``ignore_index``) is False where the
    target is ignored; ``weights`` holds the selected ``class_weights``. The
    hard prediction that decides which classes are present (``averages.predicted``)
    is taken from ``scores`` (detached): ``scores >= threshold`` for binary and
    multilabel (``(N, K, M)``), the argmax over dim 1 of ``(N, C, M)`` (all ``C``
    classes, of which ``chosen`` are selected; ``None``: all) for multiclass.
    ``hard`` is that 0/1 prediction, ``(N, K, M)``, if ``need_hard`` (for the score).
    """

    s: Tensor
    y: Tensor
    mask: Tensor | None
    hard: Tensor | None
    from_logits: bool
    weights: Tensor | None
    scores: Tensor
    threshold: float | None
    chosen: list[int] | None


def validate_inputs(input: Tensor, target: Tensor, mode: Mode, from_logits: bool,
                    ignore_index: int | None, validate_args: bool,
                    allow_empty: bool = False) -> None:
    """Refuse inputs the loss would silently mis-train on, naming the fix.

    Type, device, emptiness and (binary) shape checks are free and always run; the
    ``Mode.rows`` stages check the other modes' shapes. The checks that read the data
    (NaN/inf, ranges, class indices) cost one min/max pass over each tensor and one device
    sync; they run when ``validate_args`` is true and the module is not being traced by
    ``torch.compile`` (a data-dependent ``if`` would break a ``fullgraph=True`` graph).
    ``allow_empty`` (``sync_dist``): an empty shard joins the all-reduce with zero counts.
    """
    err = MetricError
    if not isinstance(input, Tensor) or not isinstance(target, Tensor):
        raise err(f"input and target must be tensors, got {type(input).__name__} and "
                  f"{type(target).__name__}")
    if not input.is_floating_point():
        hint = (" (class indices belong in target; input holds the scores)"
                if input.dtype not in (torch.bool, torch.complex64, torch.complex128) else "")
        raise err(f"input must be a floating-point tensor of probabilities or logits, got "
                  f"{input.dtype}{hint}; convert it with input.float()")
    if target.is_complex():
        raise err(f"target must be real, got {target.dtype}")
    mode.validate(input, target)
    if input.device != target.device:
        raise err(f"input is on {input.device} but target on {target.device}; move both to "
                  "one device")
    if input.device.type == "meta":
        raise err("input is a meta tensor, which holds no values; a loss needs real data")
    if input.numel() == 0 and not allow_empty:
        raise err(f"input is empty (shape {tuple(input.shape)}): a confusion matrix of no "
                  "elements has no metric; skip empty batches (if input.numel(): ...)")
    if not validate_args or torch.compiler.is_compiling() or input.numel() == 0:
        return
    x, t = input.detach(), target.detach()
    indices = mode.exclusive and t.shape != x.shape  # (N, *) class indices
    ignore = ignore_index
    if ignore is not None and t.dtype != torch.bool:
        # ignored elements may hold anything (255 in segmentation masks)
        t = torch.where(t == ignore, torch.zeros((), dtype=t.dtype, device=t.device), t)
    bits = t.dtype == torch.float32  # labels in [+0, 1]: int32 patterns 0 to 0x3F800000
    u = t.view(torch.int32) if bits else t
    stats = [v for w in ((x,) if t.dtype == torch.bool else (x, u)) for v in torch.aminmax(w)]
    lo, hi, *trange = (  # a GPU syncs once; on the CPU, stacking costs more than .item()s
        [v.item() for v in stats] if x.device.type == "cpu"
        else torch.stack([v.to(torch.float64) for v in stats]).tolist())
    warn_if_ignore_drops_positives(target, ignore, mode, trange)
    if bits:  # an integer min/max is 2.5x faster (NaN and negatives fall outside)
        trange = ([] if 0 <= trange[0] <= trange[1] <= 0x3F800000
                  else [v.item() for v in torch.aminmax(t)])  # the values, for a message
    if math.isnan(lo) or math.isnan(hi):
        raise err("input contains NaN; the model produced it upstream (a diverged step, "
                  "log(0), 0/0): find it with torch.autograd.set_detect_anomaly(True)")
    if math.isinf(lo) or math.isinf(hi):
        raise err(f"input contains {'-inf' if math.isinf(lo) else 'inf'}; scores must be "
                  "finite (clamp logits, or check the model for overflow)")
    if not from_logits and (lo < 0 or hi > 1):
        raise err(f"input has values outside [0, 1] (min {lo:.4g}, max {hi:.4g}) but "
                  "from_logits=False: pass from_logits=True if these are logits, or apply "
                  f"torch.{mode.activation} "
                  "first")
    if from_logits:
        warn_if_probabilities(x, mode, lo >= 0 and hi <= 1)
    if not trange:
        return
    tlo, thi = (v + 0.0 for v in trange)  # + 0.0: -0.0 reads 0 in the message
    if math.isnan(tlo) or math.isnan(thi):
        raise err("target contains NaN; labels must be 0/1 (or soft labels in [0, 1])")
    if indices:
        c = x.shape[1]
        if tlo < 0 or thi >= c:
            bad = int(tlo) if tlo < 0 else int(thi)
            raise err(f"target holds class index {bad}, but the input has {c} classes "
                      f"(indices 0 to {c - 1}); set ignore_index={bad} if it marks "
                      "elements to leave out")
    elif tlo < 0 or thi > 1:
        raise label_error(mode, tlo, thi, hard=False)


def class_rows(input: Tensor, target: Tensor, mode: Mode, from_logits: bool,
               ignore_index: int | None, classes: tuple[int, ...] | None,
               class_weights: tuple[float, ...] | None, need_hard: bool = True,
               threshold: float = 0.5, labels_checked: bool = False,
               index_labels: bool = False,
               class_step: Callable[[Tensor], Tensor] | None = None) -> ClassRows:
    """Lay out ``input`` and ``target`` as ``(N, K, M)`` rows for ``mode``.

    ``hard`` (the 0/1 predictions: probabilities ``>= threshold``, logits
    ``>= 0``, or the argmax in multiclass mode) is ``None`` unless ``need_hard``.
    The loss and the hard-label score (``metricc.evaluate.counts``) both lay out their
    batches here.

    ``labels_checked``: class indices are known to lie in ``[0, C)`` (validated),
    so a one-hot ``scatter`` may build the labels. ``index_labels``: multiclass
    class-index targets (all classes, no ``ignore_index``) come back as ``y`` of shape
    ``(N, 1, M)`` (``counts.compact_indices``; validated ones on the CPU in eager mode).
    Raises :class:`MetricError` when the target's shape (or dtype, for class indices) does
    not fit the mode; only shapes are checked (label values are not), so this stays traceable.
    The binary shape check is ``Mode.validate``, run by :func:`validate_inputs`.
    ``class_step`` (multiclass) maps the ``(N, C, *)`` input to class memberships in
    place of the softmax (a class-wise relaxation); its output is counted as it is.
    """
    if not mode.class_dim:
        return _binary_format(input, target, from_logits, ignore_index, need_hard, threshold)
    if input.dim() < 2:
        raise MetricError(f"mode={mode!r} needs input of shape (N, C, *) with classes on dim 1, "
                          f"got {tuple(input.shape)}; for one class per element use "
                          "mode='binary'")
    chosen, weights = select_classes(input.shape[1], classes, class_weights)
    # float64: weights of 7e4 (inverse frequencies) are inf in float16.
    w_t = None if weights is None else torch.tensor(weights, dtype=torch.float64,
                                                     device=input.device)
    idx = None if chosen is None else torch.tensor(chosen, device=input.device)
    if mode.exclusive:
        r = _multiclass_format(input, target, from_logits, ignore_index, need_hard,
                               labels_checked, index_labels and chosen is None, class_step)
    else:
        r = _multilabel_format(input, target, from_logits, ignore_index, need_hard, threshold)

    def pick(t: Tensor) -> Tensor:
        return t if idx is None or t.shape[1] == 1 else t.index_select(1, idx)

    def pick_some(t: Tensor | None) -> Tensor | None:
        return None if t is None else pick(t)

    if not mode.exclusive:  # thresholded per class: the selected classes' scores
        return ClassRows(pick(r.s), pick(r.y), pick_some(r.mask), pick_some(r.hard), r.from_logits,
                         w_t, pick(r.scores), r.threshold, None)
    # argmax over every class: all C scores, and which of them are selected
    return ClassRows(pick(r.s), pick(r.y), pick_some(r.mask), pick_some(r.hard), r.from_logits,
                     w_t, r.scores, None, chosen)


def single_channel(input: Tensor, target: Tensor) -> bool:
    """``(N, 1, *)`` binary scores against ``(N, *)`` labels, as segmentation models give
    them (one output channel) beside their masks: the same elements, so the same loss
    as without the channel (smp's binary losses accept it too)."""
    return (input.dim() == target.dim() + 1 and input.dim() >= 2 and input.shape[1] == 1
            and input.shape[:1] + input.shape[2:] == target.shape)


def binary_validate(input: Tensor, target: Tensor, names: tuple[str, str] = ("input", "target"),
                     hint: str = " (forward takes (input, target), predictions first)") -> None:
    """Binary inputs and targets are elementwise pairs: the same shape (the loss also takes
    :func:`single_channel` inputs)."""
    if input.shape != target.shape:
        if (input.dim() == target.dim() + 1 and input.dim() >= 2 and input.shape[1] >= 2
                and input.shape[:1] + input.shape[2:] == target.shape):
            hint = (f": {names[0]} looks like scores of {input.shape[1]} classes on dim 1 and "
                    f"{names[1]} like class indices; pass mode='multiclass' (or mode='multilabel' "
                    "with one 0/1 label per class)")
        raise MetricError(f"{names[0]} and {names[1]} must have the same shape, got "
                          f"{tuple(input.shape)} and {tuple(target.shape)}{hint}")


class Mode(str):
    """How a loss, ``score`` or stateful metric reads ``(input, target)``: one instance per
    mode, got from the user's string by :func:`look_up_mode`. A ``str`` (its name), so
    comparisons, reprs and dict keys behave as the string did; it pickles as the string (a
    holder looks it up again when unpickled, as for the strings of older pickles).

    What the mode decides (class attributes): ``name``; ``class_dim``: the input is
    ``(N, C, *)``, classes on dim 1 (binary: ``(N, *)``, one class), so ``classes``,
    ``class_weights`` and the averages over classes apply; ``exclusive``: the classes exclude
    each other (softmax probabilities, the argmax as the hard prediction, targets that may be
    class indices ``(N, *)``, so an ``ignore_index`` of 0 or 1 is a class, not a label);
    ``relaxation``: a loss's default; ``cross_entropy``: the one that reads the input as this
    mode does (``WarmStart``'s base); ``activation``: how probabilities are made from logits,
    as hints name it; ``min_classes``: the fewest classes on dim 1. :meth:`validate` is its
    first stage, the free shape checks (no data read) :func:`validate_inputs` runs; the second,
    its ``_<mode>_format``, :func:`class_rows` picks by ``class_dim`` and ``exclusive`` (module
    functions: a standalone K x K or curve file, whose loss only validates, leaves them out).
    """

    name: ClassVar[str] = ""
    class_dim: ClassVar[bool] = False
    exclusive: ClassVar[bool] = False
    relaxation: ClassVar[str] = "anyloss"
    cross_entropy: ClassVar[str] = "bce"
    activation: ClassVar[str] = "sigmoid"
    min_classes: ClassVar[int] = 1

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, (self.name,))  # the plain string, as before modes were objects

    def __deepcopy__(self, memo: Any = None) -> Mode:
        return self  # one object per mode

    __copy__ = __deepcopy__

    def validate(self, input: Tensor, target: Tensor) -> None:
        pass


class BinaryMode(Mode):
    """``(N, *)`` scores against ``(N, *)`` 0/1 labels: one class."""

    name = "binary"

    def validate(self, input: Tensor, target: Tensor) -> None:
        if not single_channel(input, target):
            binary_validate(input, target)


class MultilabelMode(Mode):
    """``(N, C, *)`` scores against ``(N, C, *)`` 0/1 labels: independent classes."""

    name = "multilabel"
    class_dim = True

    def validate(self, input: Tensor, target: Tensor) -> None:
        multilabel_validate(input, target)


class MulticlassMode(Mode):
    """``(N, C, *)`` scores against class indices ``(N, *)`` or one-hot/soft labels
    ``(N, C, *)``: one class per element."""

    name = "multiclass"
    class_dim = True
    exclusive = True
    relaxation = "softmax"
    cross_entropy = "ce"
    activation = "softmax(input, 1)"
    min_classes = 2


def _binary_format(input: Tensor, target: Tensor, from_logits: bool,
                   ignore_index: int | None, need_hard: bool = True, threshold: float = 0.5
                   ) -> ClassRows:
    """``(N, 1, M)`` rows of one class; ``mask`` is False where the target is ignored."""
    n = input.shape[0] if input.dim() > 0 else 1
    m = math.prod(input.shape[1:])  # not -1: an empty shard (n = 0) has no inferable size
    return _label_rows(input.reshape(n, 1, m), target.reshape(n, 1, m), from_logits,
                       ignore_index, need_hard, threshold)


def _label_rows(s: Tensor, t: Tensor, from_logits: bool, ignore_index: int | None,
                need_hard: bool, threshold: float) -> ClassRows:
    """Rows of independent labels (binary, multilabel): hard predictions by threshold."""
    mask = None if ignore_index is None else t != ignore_index
    y = t.to(s.dtype) if mask is None else torch.where(mask, t.to(s.dtype), 0.0)
    cut = 0.0 if from_logits else threshold
    hard = s >= cut if need_hard else None
    return ClassRows(s, y, mask, hard, from_logits, None, s.detach(), cut, None)


def _multilabel_format(input: Tensor, target: Tensor, from_logits: bool,
                       ignore_index: int | None, need_hard: bool = True, threshold: float = 0.5
                       ) -> ClassRows:
    """``(N, C, M)`` rows, one independent 0/1 label per class and element."""
    n, c = input.shape[:2]
    if target.shape != input.shape:
        raise MetricError(f"mode='multilabel' needs target of the input's shape "
                          f"{tuple(input.shape)} (one 0/1 label per class), got "
                          f"{tuple(target.shape)}")
    m = math.prod(input.shape[2:])
    return _label_rows(input.reshape(n, c, m), target.reshape(n, c, m), from_logits,
                       ignore_index, need_hard, threshold)


def _multiclass_format(input: Tensor, target: Tensor, from_logits: bool,
                       ignore_index: int | None, need_hard: bool = True,
                       labels_checked: bool = False, index_labels: bool = False,
                       class_step: Callable[[Tensor], Tensor] | None = None) -> ClassRows:
    """``(N, C, M)`` softmax probabilities (when ``from_logits``) against one-hot labels.

    Targets are class indices ``(N, *)`` or one-hot/soft labels ``(N, C, *)``;
    the hard prediction is the argmax. The rows hold probabilities, so the
    returned ``from_logits`` is False.
    """
    err = MetricError
    dtype = input.dtype
    n, c = input.shape[:2]
    if c < 2:
        raise err(f"mode='multiclass' needs at least 2 classes on dim 1, got input of shape "
                  f"{tuple(input.shape)}; for a single class use mode='binary'")
    index_shape = input.shape[:1] + input.shape[2:]
    if class_step is not None:
        p = class_step(input)
        dtype = p.dtype
    else:
        p = torch.softmax(input, dim=1) if from_logits else input
    m = math.prod(input.shape[2:])
    s = p.reshape(n, c, m)
    labels = torch.arange(c, device=input.device).view(1, c, 1)
    # argmax of the logits is the argmax of the softmax: presence is decided on the input
    scores = input.detach().reshape(n, c, m)
    # max(1).indices is that argmax (first maximum on ties, too) but several times faster
    # on CPU than argmax(1); the loss does without it (see averages.predicted)
    hard = scores.max(1).indices.unsqueeze(1) == labels if need_hard else None
    if target.shape == input.shape:
        if ignore_index is not None:
            raise err("ignore_index applies to class-index targets of shape (N, *); with "
                      "one-hot targets (N, C, *) pass class indices (target.argmax(1) with "
                      "the ignored elements set to ignore_index) instead")
        y = target.reshape(n, c, m).to(dtype)
        mask = None
    elif target.shape == index_shape:
        if target.is_floating_point() or target.is_complex():
            raise err(f"class-index targets of shape {tuple(index_shape)} must be an integer "
                      f"tensor, got {target.dtype}; use target.long(), or pass one-hot "
                      f"targets of shape {tuple(input.shape)}")
        t = target.reshape(n, 1, m)
        if ignore_index is None and index_labels:
            return ClassRows(s, compact_indices(t, c), None, hard, False, None, scores, None, None)
        if labels_checked and ignore_index is None and not torch.compiler.is_compiling():
            # one pass instead of a comparison and a conversion (which Inductor fuses)
            y = torch.zeros_like(s).scatter_(1, t if t.dtype == torch.int64 else t.long(), 1.0)
        else:
            y = (t == labels).to(dtype)
        mask = None if ignore_index is None else t != ignore_index
    else:
        raise err(f"mode='multiclass' needs target of shape {tuple(index_shape)} (class "
                  f"indices) or {tuple(input.shape)} (one-hot or soft), got "
                  f"{tuple(target.shape)}")
    return ClassRows(s, y, mask, hard, False, None, scores, None, None)


BINARY = BinaryMode(BinaryMode.name)
MULTICLASS = MulticlassMode(MulticlassMode.name)
MULTILABEL = MultilabelMode(MultilabelMode.name)
MODE_OBJECTS: dict[str, Mode] = {m.name: m for m in (BINARY, MULTICLASS, MULTILABEL)}


def look_up_mode(value: Any, choices: Sequence[str] = MODES) -> Mode:
    """The :class:`Mode` named ``value`` (one of ``choices``), else a :class:`MetricError`
    listing them (``look_up_option``'s message): the one check of a mode, where the user
    gives it.

    >>> look_up_mode("multiclass").exclusive
    True
    >>> look_up_mode("multiclas")
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: mode='multiclas' is not one of 'binary', ... (did you mean 'multiclass'?)
    """
    return MODE_OBJECTS[look_up_option("mode", value, choices)]

