"""Stage 6, evaluation: exact scores on hard labels, stateful metrics and decision thresholds."""
