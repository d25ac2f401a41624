"""The lake and the services around it: the Spark session, Delta tables, checksums, Petastorm
readers, MLflow tracking, progress lines, figures and report files. Imports only ``core``."""
