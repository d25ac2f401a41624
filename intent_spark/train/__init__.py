"""Model inputs built in Spark, training through Petastorm and PyTorch, model artifacts in
MLflow, and scoring the full catalogue into ``ranks``."""
