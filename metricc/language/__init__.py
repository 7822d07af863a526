"""Stage 1, the language: formula text -> SymPy (the grammar, the names of each statistic, size limits)."""
