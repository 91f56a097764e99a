"""A small local SparkSession for the demo and the benchmark."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def local_session(app: str, cores: int = 2, driver_memory: str = "1g"):
    """local[cores] with the UI off, few shuffle partitions and UTC. Python workers run this
    interpreter and can import this copy of pgmq_build (and pyspark_pgmq next to it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    here = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *paths])
    from pyspark.sql import SparkSession

    from . import register

    spark = (SparkSession.builder.master(f"local[{cores}]").appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(cores))
             .config("spark.default.parallelism", str(cores))
             .config("spark.driver.memory", driver_memory)
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
