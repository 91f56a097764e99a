"""Auto-registration of the "pgmq" PySpark data source: Spark imports every top-level module
named ``pyspark_*`` on the Python path and registers its ``DefaultSource``. Installed with
``pip install 'pgmq-build[spark]'``; the implementation is pgmq_build.spark."""

from pgmq_build.spark.source import PgmqDataSource as DefaultSource

__all__ = ["DefaultSource"]
