"""The K x K matrix loss: relaxed class probabilities, the soft matrix, the symbolic backward.

Torch-only, like the rest of the runtime (standalone files paste it). A compiled
matrix metric subclasses :class:`MatrixLoss` and fills in its two generated
kernels, which call the small broadcasting helpers defined first here.

For scores ``s`` (``(N, K, *)``) and class indices ``y`` (``(N, *)``), the loss
relaxes each element's prediction to class probabilities ``q`` and forms the soft
matrix ``C[i, j] = sum_n w_n [y_n = i] q_n[j]`` (one batched matmul). With
``G = d f / d C`` from the kernel, ``d loss / d q_n[j] = -/+ G[y_n, j]``: one row
of ``G`` per element, again one matmul. The softmax is left to autograd.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import MetricError
from .averages import reduce_samples
from .counts import to_input_dtype, wide_dtype
from .distributed import CountPool, updates_state
from .loss_base import StatisticLoss
from .modes import MULTICLASS
from .options import check_integer, look_up_option
from .relax import Relaxation, Softmax, bound_relaxation, check_relaxation_options
from .weights import validate_weight

#: The relaxations to class probabilities a K x K loss can use (the 2x2 relaxations of
#: :mod:`metricc.runtime.relax` act on one score at a time; these act on all K at once).
MATRIX_RELAXATIONS = ("softmax", "linear")


# --- helpers the generated kernels call ---------------------------------------------------------

def mx_size(C: Tensor) -> Tensor:
    """``K`` as a 0-dim tensor of ``C``'s dtype (roots and logs of it stay tensors)."""
    return torch.full((), C.shape[-1], dtype=C.dtype, device=C.device)


def mx_index(C: Tensor, dims: int, axis: int) -> Tensor:
    """The class indices ``0..K-1`` along ``axis`` of a ``dims``-dimensional frame."""
    k = C.shape[-1]
    shape = [1] * dims
    shape[axis] = k
    return torch.arange(k, dtype=C.dtype, device=C.device).view(shape)


def mx_entry(M: Tensor, dims: int, row_axis: int, col_axis: int) -> Tensor:
    """Entries ``M[i, j]`` of ``(R, K, K)`` matrices (or one ``(K, K)`` matrix) with
    ``i`` along ``row_axis`` and ``j`` along ``col_axis``; the diagonal when they agree."""
    if M.dim() == 2:
        M = M.unsqueeze(0)
    r, k = M.shape[0], M.shape[-1]
    shape = [1] * dims
    shape[0] = r
    if row_axis == col_axis:
        shape[row_axis] = k
        return M.diagonal(dim1=-2, dim2=-1).reshape(shape)
    if row_axis > col_axis:
        M, row_axis, col_axis = M.transpose(-1, -2), col_axis, row_axis
    shape[row_axis] = shape[col_axis] = k
    return M.reshape(shape)


def mx_sum(x: Any, dims: tuple[int, ...], K: Tensor) -> Any:
    """Sum over the class axes ``dims``, kept as size 1; a term constant along an
    axis (size 1 there, or a number) is multiplied by ``K``."""
    for d in dims:
        if isinstance(x, Tensor) and x.dim() > d and x.shape[d] != 1:
            x = x.sum(d, keepdim=True)
        else:
            x = x * K
    return x


def mx_delta(i: Tensor, j: Tensor) -> Tensor:
    return (i == j).to(i.dtype)


def mx_present(x: Tensor) -> Tensor:
    return (x > 0).to(x.dtype)


def mx_rows(x: Any, C: Tensor, dims: int) -> Tensor:
    """A kernel's value, ``(R, 1, ..., 1)`` or a number, as ``(R,)``."""
    return (C.new_zeros((C.shape[0],) + (1,) * (dims - 1)) + x).reshape(C.shape[0])


def mx_matrices(x: Any, C: Tensor, dims: int) -> Tensor:
    """A kernel's gradient, broadcast over the axes of ``a`` and ``b``, as ``(R, K, K)``."""
    r, k = C.shape[0], C.shape[-1]
    return (C.new_zeros((r, k, k) + (1,) * (dims - 3)) + x).reshape(r, k, k)


# --- relaxation and soft matrix -----------------------------------------------------------------

def class_probabilities(x: Tensor, relax: Relaxation, from_logits: bool, *,
                        autograd: bool = False) -> Tensor:
    """Relaxed class probabilities ``q`` over dim 1 of scores ``x`` (``(N, K, M)``), as the
    2x2 multiclass losses relax them: a class-wise relaxation (``softmax``, the one
    :class:`~metricc.runtime.relax.Softmax` object) maps the scores itself; ``linear`` is
    ``softmax(x)`` on logits and the probabilities as given otherwise.
    """
    if isinstance(relax, Softmax):
        return relax.classes(x, from_logits, autograd=autograd)
    return relax.value(torch.softmax(x, 1) if from_logits else x, False)


def soft_matrix(q: Tensor, y: Tensor, w: Tensor | None, samplewise: bool) -> Tensor:
    """``C[r, i, j] = sum w [y = i] q[j]`` as float64: ``(1, K, K)``, or ``(N, K, K)`` per sample.

    ``q`` is ``(N, K, M)``, ``y`` ``(N, M)`` class indices in ``0..K-1`` (ignored
    elements: any valid index with ``w = 0``), ``w`` ``(N, M)`` or ``None``. A
    scatter-add of the (weighted) probabilities into the row of each element's true
    class; no one-hot matrix is built. Sums run in float64, as the 2x2 counts' do.
    """
    n, k, m = q.shape
    qw = q if w is None else q * w.unsqueeze(1)
    qw = qw.to(torch.float64)
    if not samplewise and m == 1:
        out = torch.zeros(k, k, dtype=torch.float64, device=q.device)
        return out.index_add_(0, y.reshape(n), qw.reshape(n, k)).unsqueeze(0)
    if not samplewise and n * k * k > q.numel():
        rows = qw.permute(0, 2, 1).reshape(n * m, k)
        out = torch.zeros(k, k, dtype=torch.float64, device=q.device)
        return out.index_add_(0, y.reshape(n * m), rows).unsqueeze(0)
    # Ct[n, j, i] = sum_m [y[n, m] = i] q[n, j, m]
    index = y.unsqueeze(1).expand(n, k, m)
    ct = torch.zeros(n, k, k, dtype=torch.float64, device=q.device).scatter_add_(2, index, qw)
    c = ct.transpose(1, 2)
    return c if samplewise else c.sum(0, keepdim=True)


def matrix_rows(G: Tensor, y: Tensor, w: Tensor | None, shape: torch.Size) -> Tensor:
    """``out[n, j, m] = w[n, m] G[r, y[n, m], j]``: row ``y`` of ``G`` for every element,
    the adjoint of :func:`soft_matrix` (``r`` = ``n`` per sample, else 0)."""
    n, k, m = shape
    if G.shape[0] == 1 and m == 1:
        out = G[0].index_select(0, y.reshape(n)).unsqueeze(-1)
    else:
        gt = G.transpose(1, 2).expand(n, k, k)
        out = torch.gather(gt, 2, y.unsqueeze(1).expand(n, k, m))
    return out if w is None else out * w.unsqueeze(1)


def _matrix_function(cls: type[MatrixLoss]) -> Any:
    """The ``torch.autograd.Function`` whose backward gathers rows of the symbolic ``G``."""
    sign = -1.0 if cls.higher_is_better else 1.0

    class SymbolicMatrixMetric(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: Tensor, y: Tensor, w: Tensor | None, eps: float,
                    samplewise: bool, pool: CountPool | None, update: bool, *params: Tensor
                    ) -> Tensor:
            C = soft_matrix(q, y, w, samplewise)
            if pool is not None:
                (C,) = pool((C,), update=update)
            value, G = cls.matrix_and_gradient(C, eps, *params)
            ctx.save_for_backward(y, w, G)
            ctx.pool = pool
            ctx.in_dtype = q.dtype
            ctx.work_dtype = wide_dtype(q.dtype)
            ctx.shape = q.shape
            ctx.n_params = len(params)
            loss = 1 - value if cls.higher_is_better else value
            return loss.to(q.dtype)

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
            y, w, G = ctx.saved_tensors
            if ctx.pool is not None:
                # Every rank's loss depends on this rank's matrix through the all-reduce.
                grad = ctx.pool.sum_grad(grad)
            # d loss / d C per matrix r; d loss / d q[n, j, m] = w G'[r, y[n, m], j].
            Gs = ((grad.to(G.dtype) * sign).view(-1, 1, 1) * G).to(ctx.work_dtype)
            grad_q = matrix_rows(Gs, y, w, ctx.shape)
            return (to_input_dtype(grad_q, ctx.in_dtype), None, None, None, None, None, None,
                    *(None,) * ctx.n_params)

    SymbolicMatrixMetric.__name__ = SymbolicMatrixMetric.__qualname__ = f"{cls.__name__}Function"
    return SymbolicMatrixMetric


class MatrixLoss(StatisticLoss):
    """``1 - metric`` (or ``metric`` where lower is better) on the soft K x K matrix.

    ``forward(input, target, weight=None)``: ``input`` ``(N, K, *)`` class
    probabilities (or logits with ``from_logits=True``), ``target`` ``(N, *)``
    integer class indices, ``weight`` optional per-sample weights ``(N,)`` or
    per-element ``(N, *)``. ``relaxation``: ``"softmax"`` (sharpened by
    ``temperature``) or ``"linear"``; ``ignore_index`` drops elements with that
    target. ``multidim_average="global"`` forms one matrix for the batch,
    ``"samplewise"`` one per sample, combined by ``reduction``. ``sync_dist``
    sums the matrix over the ranks of ``process_group`` (the exact global-batch
    metric under DDP), ``memory_decay`` adds a decayed memory of past batches'
    matrices, used in training mode and updated only in a training step (gradients
    enabled; read, not written, under ``no_grad`` or ``inference_mode``;
    ``docs/distributed.md``). ``backward="symbolic"`` runs the
    generated gradient ``d f / d C``; ``"autograd"`` differentiates the forward.
    ``eps`` guards denominators, roots and logs. A batch (or, samplewise, a sample) with no
    element left (every target ``ignore_index``, or every weight 0) has no matrix: its loss
    is the constant 1 with zero gradient (a metric of 0: chance level for the kappas and
    MCC), never the optimum, and samplewise it is left out of ``mean``/``sum`` (unless every
    sample is empty); with ``sync_dist`` or ``memory_decay`` the pooled matrix decides.
    """

    #: The shared input checks read K x K inputs as multiclass ones (not an option here).
    mode = MULTICLASS
    #: Names of the K x K parameters the kernels take after ``eps``, and their values.
    matrix_parameters: ClassVar[tuple[str, ...]] = ()
    matrix_values: ClassVar[tuple[tuple[tuple[float, ...], ...], ...]] = ()

    @staticmethod
    def matrix_value(C: Tensor, eps: float, *params: Tensor) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def matrix_and_gradient(C: Tensor, eps: float, *params: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._function = _matrix_function(cls)

    def __init__(
        self,
        relaxation: str = "softmax",
        *,
        temperature: float = 1.0,
        from_logits: bool = False,
        backward: str = "symbolic",
        multidim_average: str = "global",
        reduction: str = "mean",
        eps: float = 1e-7,
        sync_dist: bool = False,
        process_group: Any = None,
        memory_decay: float | None = None,
        ignore_index: int | None = None,
        validate_args: bool = True,
    ) -> None:
        super().__init__(from_logits=from_logits, reduction=reduction, eps=eps,
                         validate_args=validate_args, sync_dist=sync_dist,
                         process_group=process_group, memory_decay=memory_decay,
                         multidim_average=multidim_average, backward=backward)
        look_up_option("relaxation", relaxation, MATRIX_RELAXATIONS)
        # The 2x2 losses' relaxation objects and checks: one softmax, one temperature rule.
        self.temperature = check_relaxation_options({"temperature": temperature})["temperature"]
        self.relax = bound_relaxation(relaxation, self.from_logits,
                                      {"temperature": self.temperature})
        self.relaxation = relaxation
        self.ignore_index = None if ignore_index is None else check_integer("ignore_index",
                                                                            ignore_index)
        for name, values in zip(self.matrix_parameters, self.matrix_values, strict=True):
            self.register_buffer(f"param_{name}", torch.tensor(values, dtype=torch.float64),
                                 persistent=False)

    def repr_options(self) -> list[str]:
        """The relaxation, its temperature, how samples and elements combine
        (:meth:`StatisticLoss.extra_repr` adds memory, sync, eps and the backward)."""
        parts = [f"relaxation={self.relaxation!r}", f"temperature={self.temperature!r}",
                 f"from_logits={self.from_logits}", f"multidim_average={self.multidim_average!r}"]
        if self.multidim_average == "samplewise":
            parts.append(f"reduction={self.reduction!r}")
        if self.ignore_index is not None:
            parts.append(f"ignore_index={self.ignore_index!r}")
        return parts

    def _params(self) -> list[Tensor]:
        return [getattr(self, f"param_{n}") for n in self.matrix_parameters]

    def check_inputs(self, input: Tensor, target: Tensor, validate_args: bool) -> None:
        """The K x K shape rules (class indices only, K >= 2, the parameters' size), then
        the shared multiclass checks and hints of every loss."""
        err = MetricError
        if not isinstance(input, Tensor) or not isinstance(target, Tensor):
            raise err(f"input and target must be tensors, got {type(input).__name__} and "
                      f"{type(target).__name__}")
        if input.dim() < 2 or input.shape[1] < 2:
            raise err(f"input must have shape (N, K, *) with K >= 2 classes on dim 1, got "
                      f"{tuple(input.shape)}")
        index_shape = input.shape[:1] + input.shape[2:]
        if target.shape != index_shape:
            raise err(f"target must hold class indices of shape {tuple(index_shape)} (the "
                      f"input's shape without dim 1), got {tuple(target.shape)}")
        if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
            raise err(f"target must be an integer tensor of class indices, got {target.dtype}; "
                      "use target.long()")
        k = input.shape[1]
        for name, p in zip(self.matrix_parameters, self._params(), strict=True):
            if p.shape[-1] != k:
                raise err(f"the parameter {name} is {p.shape[0]} x {p.shape[1]} but the input "
                          f"has {k} classes")
        super().check_inputs(input, target, validate_args)

    def _weight_map(self, weight: Tensor | None, target: Tensor) -> Tensor | None:
        """The weight map as a tensor of the target's shape (``(N,)`` per sample), or ``None``."""
        if weight is None:
            return None
        if isinstance(weight, Tensor) and weight.dim() == 1 and target.dim() > 1 \
                and weight.shape == target.shape[:1]:
            weight = weight.view(-1, *(1,) * (target.dim() - 1))  # one weight per sample
        return validate_weight(weight, target, self.validate_args)

    def forward(self, input: Tensor, target: Tensor, weight: Tensor | None = None) -> Tensor:
        """The loss; ``weight`` ``(N,)`` per sample or broadcastable to ``target``."""
        target = target.detach() if isinstance(target, Tensor) else target
        self.check_inputs(input, target, self.validate_args)
        weight = self._weight_map(weight, target)
        n, k = input.shape[:2]
        m = math.prod(input.shape[2:])  # not -1: an empty shard (n = 0) has no inferable size
        work = wide_dtype(input.dtype)
        x = input.to(work).reshape(n, k, m)
        y = target.reshape(n, m)
        w = None if weight is None else weight.reshape(n, m).to(work)
        if self.ignore_index is not None:
            keep = (y != self.ignore_index).to(work)
            w = keep if w is None else w * keep
            # Any valid row for ignored elements: their weight is 0.
            y = torch.where(y == self.ignore_index, torch.zeros_like(y), y)
        q = class_probabilities(x, self.relax, self.from_logits,
                                autograd=self.backward_mode == "autograd")
        samplewise = self.multidim_average == "samplewise"
        try:
            if self.backward_mode == "symbolic":
                if self.pool is not None:  # the matrix's memory, made outside the Function
                    self.pool.prepare((1, k, k, 1), q.device)
                losses = self._function.apply(q, y, w, self.eps, samplewise, self.pool,
                                              updates_state(self), *self._params())
            else:
                C = soft_matrix(q, y, w, samplewise)
                if self.pool is not None:
                    (C,) = self.pool((C,), differentiable=True)
                value = self.matrix_value(C, self.eps, *self._params())
                losses = (1 - value if self.higher_is_better else value).to(work)
        except (RuntimeError, IndexError) as e:
            # validate_args=False reads no data; torch's own index check (free, on the CPU) is
            # then the one that fires: say which input and what to do.
            if "out of bounds" not in str(e):
                raise
            raise MetricError(f"target holds class indices outside 0..{k - 1} (validate_args="
                              "False skips the check that names them; pass ignore_index for "
                              "masked elements)") from None
        kept = torch.ones_like(losses, dtype=torch.bool)
        if w is not None and self.pool is None:
            # No element left (all ignored, or weight 0): no matrix, so no metric. 1 - f of an
            # empty matrix can read as the optimum (quadratic kappa: 1 - 0/eps = 1, loss 0);
            # its loss is the constant 1 with no gradient, and samplewise it is not averaged.
            total = w.sum(-1)
            kept = total > 0 if samplewise else (total.sum() > 0).reshape(1)
            losses = torch.where(kept, losses, torch.ones_like(losses))
        if not samplewise:
            return losses[0]
        return reduce_samples(losses, kept, self.reduction)
