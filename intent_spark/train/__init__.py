"""Model inputs built in Spark, training through the readers and PyTorch, model artifacts in
MLflow, and scoring the full catalogue into ``ranks``."""
