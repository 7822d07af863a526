"""``MetricLoss``: the loss module every compiled metric subclasses.

A compiled metric fills in the two generated kernels (``metric_value``,
``metric_and_coefficients``); everything else is here and in the modules this
one imports (the symbolic autograd Function is in ``symbolic``), which
standalone loss files carry too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import MetricError
from .averages import average_rows, predicted, reduce_samples
from .counts import HALF_MAX, as_count_rows, indices_in_range, soft_counts, wide_dtype
from .distributed import updates_state
from .hints import overflow_message
from .logit_grad import softmax_eager_function, softmax_index_function, softmax_index_loss
from .loss_base import StatisticLoss, check_rows
from .modes import class_rows, look_up_mode, validate_inputs
from .options import DEFAULT_MODE, check_class_options, check_flag, look_up_option
from .relax import OPTION_DEFAULTS, OPTION_OWNERS, RELAXATIONS, Softmax, bound_relaxation, check_relaxation_options
from .sigmoids import stable_sigmoid
from .symbolic import fits, host_twin, symbolic_function
from .weights import validate_weight, weight_rows


class MetricLoss(StatisticLoss):
    """``1 - metric`` (or ``metric`` where lower is better) on a relaxed confusion matrix.

    ``forward(input, target)``: ``input`` holds probabilities (or logits with
    ``from_logits=True``). ``mode="binary"``: ``target`` 0/1 (or soft) labels
    of the input's shape ``(N, *)``. ``"multiclass"``: input ``(N, C, *)``
    (softmax applied when ``from_logits``), target ``(N, *)`` integer class
    indices or ``(N, C, *)`` one-hot/soft labels. ``"multilabel"``: input and
    target ``(N, C, *)``, one independent sigmoid per class. ``average`` combines
    the classes (``micro`` pools their counts, ``macro`` averages their losses,
    ``weighted`` by support, ``none`` returns one per class); ``ignore_index``
    drops elements with that target from every count; ``classes`` picks class
    indices and ``class_weights`` (one per class) weighs them.
    ``forward(input, target, weight=w)`` counts each element ``w`` times (a map
    ``>= 0`` broadcastable to the target); ``soft_label=True`` counts the overlap
    ``min(a, y)`` so that soft targets are matched exactly at ``input == target``
    (``docs/weights-and-soft-labels.md``).
    With ``multidim_average="global"`` the whole batch forms the confusion
    matrices; with ``"samplewise"`` each sample has its own and ``reduction``
    (``mean``, ``sum``, ``none``) combines the samples. Averages skip classes
    and samples with neither target nor (hard) prediction, falling back to all
    when none remain: see ``docs/modes.md``.
    ``backward="symbolic"`` runs the backward pass from the metric's symbolic
    partials in one elementwise pass per row; ``"autograd"`` differentiates the
    forward. Softmax and sigmoid are left to autograd either way. The target gets
    no gradient in either mode (it is detached: labels, not parameters).
    ``eps`` guards every denominator, root and log (``docs/numerics.md``);
    ``validate_args`` checks the data for NaN/inf, out-of-range values and class
    indices (one min/max pass; skipped while ``torch.compile`` traces). Half and
    bfloat16 inputs give a float32 loss; counts are summed in float64.
    ``sync_dist`` sums the counts over ranks; ``memory_decay`` adds a decayed memory of
    past batches' counts, used in training mode and updated only in a training step
    (gradients enabled): under ``no_grad`` or ``inference_mode`` it is read, not written
    (``docs/distributed.md``).
    """

    #: Non-empty for metrics that use TN: why multiclass micro-averaging is refused
    #: (``docs/modes.md``); the message names the K x K metric to use instead.
    micro_refusal: ClassVar[str] = ""
    #: The kernels' twins on Python floats (``symbolic.host_twin``), or None.
    _host_value: ClassVar[Any] = None
    _host_coefficients: ClassVar[Any] = None
    #: The compiled multiclass softmax loss on class indices (``logit_grad``).
    _softmax_function: ClassVar[Any] = None
    _softmax_eager: ClassVar[Any] = None

    @staticmethod
    def metric_value(TP: Tensor, FP: Tensor, FN: Tensor, TN: Tensor, eps: float) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def metric_and_coefficients(
        TP: Tensor, FP: Tensor, FN: Tensor, TN: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._host_value = host_twin(cls.metric_value)
        cls._host_coefficients = host_twin(cls.metric_and_coefficients)
        cls._function = symbolic_function(cls)
        cls._softmax_function = softmax_index_function(cls)
        cls._softmax_eager = softmax_eager_function(cls)

    def __init__(
        self,
        relaxation: str | None = None,
        *,
        amplifier: float = OPTION_DEFAULTS["amplifier"],
        slope: float = OPTION_DEFAULTS["slope"],
        offset: float = OPTION_DEFAULTS["offset"],
        temperature: float = OPTION_DEFAULTS["temperature"],
        alpha: float = OPTION_DEFAULTS["alpha"],
        from_logits: bool = False,
        backward: str = "symbolic",
        multidim_average: str = "global",
        reduction: str = "mean",
        eps: float = 1e-7,
        sync_dist: bool = False,
        process_group: Any = None,
        memory_decay: float | None = None,
        mode: str = DEFAULT_MODE,
        average: str = "macro",
        ignore_index: int | None = None,
        classes: Sequence[int] | None = None,
        class_weights: Sequence[float] | None = None,
        validate_args: bool = True,
        soft_label: bool = False,
    ) -> None:
        super().__init__(from_logits=from_logits, reduction=reduction, eps=eps,
                         validate_args=validate_args, sync_dist=sync_dist,
                         process_group=process_group, memory_decay=memory_decay,
                         multidim_average=multidim_average, backward=backward)
        self.soft_label = check_flag("soft_label", soft_label)
        mode = look_up_mode(mode)
        if relaxation is None:  # the default: the relaxed argmax for classes, else AnyLoss
            relaxation = mode.relaxation
        look_up_option("relaxation", relaxation)
        # Every relaxation option is checked by the relaxation declaring it; the chosen
        # relaxation holds its own (self.relax), the others stay attributes for the repr.
        options = check_relaxation_options({"amplifier": amplifier, "slope": slope,
                                            "offset": offset, "temperature": temperature,
                                            "alpha": alpha})
        self.relax = bound_relaxation(relaxation, self.from_logits, options)
        self.amplifier, self.slope, self.offset, self.temperature, self.alpha = options.values()
        self.relaxation = relaxation
        self.mode = mode
        self.average = average
        self.ignore_index, self.classes, self.class_weights = check_class_options(
            mode, average, ignore_index, classes, class_weights)
        if mode.exclusive and average == "micro" and self.micro_refusal:
            raise MetricError(self.micro_refusal)
        self.relax.check_mode(mode)
        # A class-wise relaxation has relaxed the classes already: count what it gave.
        self.count_relax = RELAXATIONS["linear"] if self.relax.class_wise else self.relax

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle; a loss pickled before relaxations held their options gets them here."""
        super().__setstate__(state)
        if "relax" not in state:
            for name, owner in OPTION_OWNERS.items():  # options added since: their defaults
                if name not in state:
                    self.__dict__[name] = getattr(owner, name)
            own = {k: getattr(self, k) for k in RELAXATIONS[self.relaxation].options}
            self.relax = bound_relaxation(self.relaxation, self.from_logits, own)
            self.count_relax = RELAXATIONS["linear"] if self.relax.class_wise else self.relax

    def repr_options(self) -> list[str]:
        """The relaxation and its own options, the mode and the class options that are set
        (:meth:`StatisticLoss.extra_repr` adds memory, sync, eps and the backward)."""
        parts = [f"relaxation={self.relaxation!r}"]
        parts += [f"{k}={getattr(self.relax, k)!r}" for k in self.relax.options]
        parts += [f"from_logits={self.from_logits}", f"mode={self.mode!r}"]
        if self.mode.class_dim:
            parts.append(f"average={self.average!r}")
        parts.append(f"multidim_average={self.multidim_average!r}")
        if self.multidim_average == "samplewise":
            parts.append(f"reduction={self.reduction!r}")
        for name in ("ignore_index", "classes", "class_weights"):
            if getattr(self, name) is not None:
                parts.append(f"{name}={getattr(self, name)!r}")
        return parts

    def row_losses(self, s: Tensor, y: Tensor, w: Tensor | None = None, *,
                   from_logits: bool | None = None) -> Tensor:
        """Loss of each row of ``(R, M)`` scores against ``(R, M)`` labels, shape ``(R,)``.

        ``(N, R, M)`` inputs give one loss per row ``r``, pooling ``[:, r, :]``.

        ``from_logits`` overrides the module's setting (multiclass rows hold
        softmax probabilities even when the input held logits). ``w``: weights of the
        scores' shape, or ``None``.
        """
        check_rows(s, y, w)
        return self._losses_and_support(s, y, w, from_logits)[0]

    def _losses_and_support(self, s: Tensor, y: Tensor, w: Tensor | None,
                            from_logits: bool | None) -> tuple[Tensor, Tensor]:
        """:meth:`row_losses` and each row's support ``sum(w y)`` (``TP + FN`` of this
        batch, before any pooling; float64, detached), which the averages need."""
        fl = self.from_logits if from_logits is None else from_logits
        if self.backward_mode == "symbolic":
            # Whether a training step, decided here: the Function's forward runs without grad.
            out = self._function.apply(s, y, w, self.count_relax, fl, self.eps, self.pool,
                                       self.soft_label, updates_state(self))
            return self._finite(out[0]), out[1]
        # Same dtype path as the symbolic backward: float32 at least.
        work = wide_dtype(s.dtype)
        sw = s.to(work)
        if s.dtype == torch.float16 and sw.requires_grad:
            sw.register_hook(lambda g: g.clamp(-HALF_MAX, HALF_MAX))
        a = self.count_relax.value(sw, fl, sigmoid=stable_sigmoid)
        counts = soft_counts(a, y.to(work), None if w is None else w.to(work), self.soft_label)
        support = (counts[0] + counts[2]).detach()
        if self.pool is not None:
            counts = self.pool(counts, differentiable=True)
        value = as_count_rows(self.metric_value(*counts, self.eps), counts[0])
        loss = 1 - value if self.higher_is_better else value
        if self.validate_args and loss.dtype != work and not torch.compiler.is_compiling():
            # A float64 loss past float32's range would come back as -inf: refuse it as the
            # symbolic backward does (one more host sync, as the data checks take).
            flat = loss.detach().reshape(-1)
            fits(float(flat[flat.abs().argmax()]) if flat.numel() else 0.0, work)
        return self._finite(loss.to(work)), support

    def _finite(self, losses: Tensor) -> Tensor:
        """``losses``, refused when not finite (eager, ``validate_args``): the kernels guard
        0/0 with ``eps``, so an inf (or, with ``eps > 0``, a NaN) is the formula overflowing
        (``exp(exp(TP))``). With ``eps=0`` a 0/0 batch is NaN, as that option documents."""
        if self.validate_args and not torch.compiler.is_compiling():
            bad = torch.isinf(losses) if self.eps == 0 else ~torch.isfinite(losses)
            if bool(bad.any()):
                raise MetricError(overflow_message(type(self).formula, losses))
        return losses

    def forward(self, input: Tensor, target: Tensor, weight: Tensor | None = None) -> Tensor:
        """The loss; ``weight`` (``>= 0``, broadcastable to ``target``) counts each element
        that many times: integer weights equal repeating the elements."""
        # A hot path, kept in one piece past 80 lines: it runs on every call, and each
        # helper call costs a Python frame that small batches measure (docs/performance.md).
        # Targets are labels: no gradient flows into them, whichever the backward (the
        # symbolic backward never gave one; autograd would have).
        target = target.detach() if isinstance(target, Tensor) else target
        # StatisticLoss.check_inputs written out (a call less). Under sync_dist an empty shard
        # must still join the all-reduce (the other ranks wait): zero counts, zero gradient.
        validate_inputs(input, target, self.mode, self.from_logits, self.ignore_index,
                        self.validate_args,
                        allow_empty=self.pool is not None and self.pool.sync_dist)
        if weight is not None:
            weight = validate_weight(weight, target, self.validate_args)
        # One class (binary) makes every average the same; micro is the cheapest.
        average = self.average if self.mode.class_dim else "micro"
        samplewise = self.multidim_average == "samplewise" and input.dim() > 0
        # Micro over the whole batch is one row, its own average: presence is not needed.
        single = average == "micro" and not samplewise
        eager = not torch.compiler.is_compiling()
        # The eager shortcuts below branch on data (a host sync each) and use bincount
        # (which syncs on CUDA): on the CPU they are free; on a GPU, where kernel launches
        # and syncs dominate at these sizes, the branch-free forms are faster.
        host = eager and input.device.type == "cpu"
        relax = self.relax
        step = None
        if isinstance(relax, Softmax):
            def step(x: Tensor) -> Tensor:
                return relax.classes(x, self.from_logits, autograd=self.backward_mode == "autograd")
        index_labels = (self.backward_mode == "symbolic" and self.mode.exclusive
                        and not samplewise and average != "micro" and weight is None
                        and not self.soft_label)
        if index_labels and host and not self.validate_args and self.ignore_index is None:
            # on the CPU in eager mode indices are counted by gather and scatter, which
            # need them in [0, C): unchecked ones are read once (elsewhere a fused
            # comparison counts an index outside it for no class)
            index_labels = indices_in_range(target, input.shape[1] if input.dim() > 1 else 0)
        r = class_rows(input, target, self.mode, self.from_logits, self.ignore_index,
                       self.classes, self.class_weights, need_hard=False,
                       labels_checked=self.validate_args and eager,
                       index_labels=index_labels, class_step=step)
        fused = softmax_index_loss(self, input, r, average)
        if fused is not None:  # a softmax on class indices (CPU or compiled): see logit_grad
            return fused
        n, k, m = r.s.shape
        # Weights stay wide (float32 at least): an inverse-frequency class weight of 7e4
        # is inf in float16, and the counts are summed in float32+ anyway.
        wdt = wide_dtype(r.s.dtype)
        w = None if r.mask is None else r.mask.to(wdt).expand(n, k, m)
        elements = r.mask  # which elements count, for the presence test below
        if weight is not None:
            per_class = self.mode.class_dim and target.shape == input.shape
            ew = weight_rows(weight, n, per_class, self.classes, wdt)
            w = ew.expand(n, k, m) if w is None else w * ew
            elements = ew if r.mask is None else ew * r.mask
        if average == "micro" and r.weights is not None:
            # Micro pools the classes' counts, so a class weight scales its elements.
            cw = r.weights.to(wdt).view(1, k, 1)
            w = cw.expand(n, k, m) if w is None else w * cw

        def rows(t: Tensor) -> Tensor:
            if average == "micro":  # one row per sample (or one for the batch)
                return t.reshape(n, k * m) if samplewise else t.reshape(1, -1)
            # one row per (sample, class), or per class: (N, K, M) pools dims 0 and 2,
            # which saves transposed copies of the scores, labels and gradient
            return t.reshape(n * k, m) if samplewise else t

        yr = rows(r.y)
        wr = None if w is None else rows(w)
        losses, support = self._losses_and_support(rows(r.s), yr, wr, r.from_logits)
        if single:
            return losses.view(())  # not losses[0]: select's backward costs a fresh buffer
        # Each row's support, per (sample, class): rows are classes (pooled over the
        # batch), (sample, class) pairs, or samples (micro).
        if not samplewise:
            support_nk = support.view(1, k).expand(n, k)
        elif average == "micro":
            support_nk = support.view(n, 1).expand(n, k)
        else:
            support_nk = support.view(n, k)
        # A row's hard predictions matter only where it has no support; on the CPU in
        # eager mode, where a data-dependent branch is free, only those are computed.
        need = (support_nk == 0) if host else None
        hit = predicted(r, need, element_weights=w if average == "micro" else elements)
        if not samplewise:
            hit = hit.any(0)
        elif average == "micro":
            hit = hit.any(1)
        present = (support > 0) | hit.reshape(-1)
        if self.pool is not None:
            support = self.pool.across_ranks(support)
            present = self.pool.across_ranks(present) > 0
        shape = (n if samplewise else 1, -1)
        per, keep = average_rows(losses.view(shape), present.view(shape), support.view(shape),
                                 None if average == "micro" else r.weights,
                                 "macro" if average == "micro" else average)
        if not samplewise:
            return per[0]
        return reduce_samples(per, keep, self.reduction)
