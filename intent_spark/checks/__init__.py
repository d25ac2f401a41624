"""Checks that trust nothing of the stages they check: ``verify`` (leakage and checksums of a split)
and ``audit`` (the paper's admission criteria on an ingested dataset)."""
