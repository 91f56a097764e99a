# pgmq: PGXS install of the generated extension/ (needs pg_config, not Python), plus the
# developer targets. The SQL under extension/ is generated from templates/ and committed, so
# `make install` never renders anything.
PG_CONFIG  ?= pg_config
# BUILD_PY, not PYTHON: PGXS's Makefile.global overrides PYTHON.
BUILD_PY   ?= python3
EXT         = pgmq
# The control file lives in extension/, so EXTENSION stays unset (PGXS would look for
# ./pgmq.control); MODULEDIR sends DATA to <sharedir>/extension.
MODULEDIR   = extension
# Every extension script of extension/: the current version's install script, the chain of
# upgrade steps from the newest released versions (UPGRADE_WINDOW in pgmq_build/manifest.py;
# ALTER EXTENSION pgmq UPDATE runs it), the step
# from upstream PGMQ (pgmq--1.13.x--<version>.sql) and the bridges to it from upstream's
# versions (pgmq--1.13.0--1.13.x.sql, a comment). Older released scripts wait in
# history/extension/ (for the tests): no upgrade path needs them, so they are not installed.
# The standalone scripts (pgmq-standalone--*) are not extension files and are not installed.
DATA        = extension/$(EXT).control $(sort $(wildcard extension/$(EXT)--*.sql))

PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)

# The retired upgrade steps too (history/extension/: from releases older than the window), for a
# database at such a release; then ALTER EXTENSION pgmq UPDATE as usual.
RETIRED = $(sort $(wildcard history/extension/$(EXT)--2.*--2.*.sql))
install-retired: install
	$(INSTALL_DATA) $(RETIRED) '$(DESTDIR)$(datadir)/$(datamoduledir)/'
else
all install install-retired:
	@echo "pg_config not found: install PostgreSQL (Debian: apt-get install postgresql-15) or run 'make deps'" >&2; exit 1
endif

.PHONY: install-retired deps generate gates docs test demo demo-migrate demo-spark bench bench-steady bench-metrics bench-contention bench-big bench-archive chaos

# Everything a fresh machine lacks: PostgreSQL (apt-get, when root) and the Python packages.
deps:
	bash tools/ensure-deps.sh

generate:
	$(BUILD_PY) -m pgmq_build generate

gates:
	$(BUILD_PY) -m pgmq_build check
	$(BUILD_PY) -m pgmq_build lint
	$(BUILD_PY) -m pgmq_build pgspot
	$(BUILD_PY) -m ruff check pgmq_build bench chaos tests pyspark_pgmq.py
	NO_MKDOCS_2_WARNING=1 $(BUILD_PY) -m mkdocs build --strict --quiet --site-dir site

# The documentation site, served at http://127.0.0.1:8000/ while you edit docs/ (CONTRIBUTING.md).
docs:
	$(BUILD_PY) -m mkdocs serve

# The README's test command: set-up, install, static gates, then the whole suite: everything but
# the fault suite in two worker processes (each with its own throwaway server; the Spark tests
# share one), then the fault suite alone, whose recovery figures want the machine to themselves.
# Exit status 5 (no test selected, e.g. PYTEST_ARGS="-k notify" in one half) is not a failure.
TEST_WORKERS ?= 2
test: deps
	$(MAKE) --no-print-directory install
	$(MAKE) --no-print-directory gates
	$(BUILD_PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not chaos" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BUILD_PY) -m pytest -m chaos $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The README's demo command: a throwaway server unless DSN is given.
demo: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m pgmq_build demo $(if $(DSN),--dsn "$(DSN)")

# Upstream PGMQ (SQL from the PyPI package pgmq) in use, migrated in place by `pgmq-build migrate`.
demo-migrate: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m pgmq_build demo --migrate $(if $(DSN),--dsn "$(DSN)")

demo-spark: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m pgmq_build demo --spark $(if $(DSN),--dsn "$(DSN)")

bench: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m bench $(BENCH_ARGS)

# Paced producers and consumers for 10 minutes with a 2-minute xmin hold (bench/steady.py).
bench-steady: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m bench steady $(STEADY_ARGS)

# The fault suite (chaos): short scenarios and a 1-minute soak on throwaway servers;
# CHAOS_ARGS="--long --out chaos.md" for minutes-long faults and a 60-minute soak (with the Spark
# streaming query; "--spark" adds it to the short run).
chaos: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m chaos $(CHAOS_ARGS)

# What a metrics call costs on a queue of 1M messages, ours and upstream's (bench/metrics_cost.py).
bench-metrics: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m bench metrics $(METRICS_ARGS)

# Consumers 1 to 256 on one full queue, raw / upstream / ours, with pgbench: msgs/s, CPU per
# message, p99; tables and a PNG (bench/contention.py).
CONTENTION_ARGS ?= --out /tmp/contention.md --plot /tmp/contention.png --json /tmp/contention.json
bench-contention: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m bench contention $(CONTENTION_ARGS)

# send / read + delete / pop / metrics cost on queues of 1M and 10M messages, plain and
# partitioned (bench/big_queues.py); BIG_ARGS="--sizes 50000000" if the disk allows.
bench-big: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m bench big $(BIG_ARGS)

# A partitioned queue's archive under retention: bounded size, flat cost (ARCHIVE_ARGS: see
# `python3 -m bench archive --help`).
bench-archive: deps
	$(MAKE) --no-print-directory install
	$(BUILD_PY) -m bench archive $(ARCHIVE_ARGS)
