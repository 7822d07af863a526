"""Stage 2, analysis: simplification, derivatives, guards, where a metric is undefined, and checks."""
