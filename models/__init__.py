"""Reference models (SPEC 4) and the tie-aware full-catalogue rank (SPEC 5), in numpy and torch.

Nothing here touches Spark: the models see item indices (1..N, 0 = padding) prepared by
``intent_spark.model_inputs`` and read through Petastorm by ``intent_spark.modeling``.
"""

MODEL_NAMES = ("popularity", "repeat_last", "sasrec", "sasrec_f")
