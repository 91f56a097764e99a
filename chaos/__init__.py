"""The fault suite: ``python3 -m chaos [--long] [--only NAME,...] [--soak MINUTES]
[--spark] [--out PATH]`` (`make chaos`).

Scenarios (runner.SCENARIOS) run producers, consumers, the worker and a Client.consume loop
(load.py), with --spark also a Spark streaming query kept running by a supervisor
(spark_query.py), against a throwaway server, inject one kind of fault (faults.py), and check the
ledger (ledger.py): every produced message in exactly one place, none delivered beyond its
retry limit, throughput back within 10 % of the pre-fault rate. The soak (runner.run_soak)
repeats faults under steady load and samples table sizes and dead tuples (sampler.py). The
report (report.py) is printed and written as Markdown and JSON.
"""
