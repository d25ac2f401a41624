"""The models (SPEC 4 and 9) and the tie-aware full-catalogue rank (SPEC 5), in numpy and torch.

``interface`` is what a model implements, built in or from any package; the reference models
(popularity, repeat_last, sasrec, sasrec_f, gru4rec, text_encoder) are built through it. Nothing
here touches Spark: the models see item indices (1..N, 0 = padding) that the train stage
prepares (``intent_spark.train``) and reads through Petastorm.
"""
