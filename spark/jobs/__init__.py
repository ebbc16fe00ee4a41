"""Runnable Spark jobs: ``python -m spark.jobs.<name> --help``."""
