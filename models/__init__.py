"""The reference models (SPEC 4 and 9): popularity, repeat_last, sasrec, sasrec_f, gru4rec and
text_encoder, in numpy and torch.

Each is built on the public plug-in module, ``intent_spark.plugin``, and on nothing else of the
framework, as a third party's model is. Nothing here touches Spark: the models see item indices
(1..N, 0 = padding) that the train stage prepares (``intent_spark.train``) and reads through
Petastorm, and the framework ranks what they give back.
"""
