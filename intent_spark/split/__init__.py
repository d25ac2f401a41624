"""The split stage (SPEC 3): holdout, cutoff rule, cells, targets, the other protocols and seeds,
cutoff sensitivity and the split report."""
