"""docs/reference/spark-options.md: the Spark data source's options, from their declaration
(pgmq_build/spark_options.py), which the source and sink read."""

from __future__ import annotations

from ..spark_options import DECLARED, DIRECTIONS

HEADER = """\
# Spark data source options

The options of the Spark data source `pgmq` (`spark.read`, `spark.readStream` and
`df.write` / `writeStream` with `.format("pgmq")`). Keys are case-insensitive, values strings.
An option a direction does not list, an option of queues given with `stream` (or of streams
without it), and a bad value fail in the driver before any task runs. Generated from
`pgmq_build/spark_options.py` by `pgmq-build generate` (do not edit; `pgmq-build check` fails
when it is stale).
"""

_APPLIES = {"both": "queues and streams", "queue": "queues", "stream": "streams"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def page() -> str:
    """The text of docs/reference/spark-options.md."""
    out = [HEADER, "| Option | Directions | For | Default | Meaning |", "|---|---|---|---|---|"]
    for o in DECLARED:
        where = ", ".join(d for d in DIRECTIONS if d in o.where)
        out.append(f"| `{o.name}` | {where} | {_APPLIES[o.applies]} | {_cell(o.default)} | {_cell(o.doc)} |")
    return "\n".join(out) + "\n"
