"""From ranks to metrics: per-user and per-cell scores with intervals, paired comparisons,
protocol agreement and the leak measure."""
