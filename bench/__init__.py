"""The benchmarks behind `make bench` (``python3 -m bench``): run.py measures pgmq's
SQL API against a plain-SQL baseline (the workloads are in workloads.py), spark.py the Spark
connector's publish and consume paths."""
