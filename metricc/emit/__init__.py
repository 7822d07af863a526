"""Stage 3, emit: SymPy -> torch source text, the loss class that runs it, and standalone files.

``metricc.emit.MetricPrinter``, ``emit_kernels``, ``build_loss_class`` and ``loss_parameters``
stay importable from here, where they were before the stage folders.
"""

from .counts import KERNEL_NAMES, emit_kernels
from .loss_class import build_loss_class, loss_parameters
from .printer import MetricPrinter

__all__ = ["KERNEL_NAMES", "MetricPrinter", "build_loss_class", "emit_kernels", "loss_parameters"]
