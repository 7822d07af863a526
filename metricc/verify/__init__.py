"""Stage 5, verify: generated code proved equal to SymPy's derivatives, gradients checked numerically.

``metricc.verify.verify``, ``VerificationReport`` and ``symbolic_equal`` stay importable from here.
"""

from .counts import Check, VerificationReport, symbolic_equal, verify

__all__ = ["Check", "VerificationReport", "symbolic_equal", "verify"]
