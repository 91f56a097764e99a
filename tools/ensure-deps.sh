#!/usr/bin/env bash
# Installs what a fresh machine lacks for the tests, the demo and the benchmarks:
# PostgreSQL 15 server binaries and pg_partman (Debian packages, when run as root) and the
# Python packages.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${BUILD_PY:-python3}
APT_PACKAGES="postgresql-15 postgresql-client-15 postgresql-15-partman"
# pg_partman (partitioned queues; the tests create it per database) ships this control file.
PARTMAN_CONTROL=/usr/share/postgresql/15/extension/pg_partman.control

have_server() {
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1
}
have_pgxs() {
    command -v pg_config >/dev/null 2>&1 && [ -f "$(pg_config --pgxs 2>/dev/null)" ]
}

have_partman() {
    [ -f "$PARTMAN_CONTROL" ]
}

if ! have_server || ! have_pgxs || ! have_partman; then
    if [ "$(id -u)" = 0 ]; then
        echo "ensure-deps: installing $APT_PACKAGES with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $APT_PACKAGES >/dev/null
    else
        echo "ensure-deps: PostgreSQL 15 or pg_partman is missing; install them: sudo apt-get install $APT_PACKAGES" >&2
        exit 1
    fi
fi

# The dashboard's tests look at its pages in a real browser: Debian's Chromium and its driver.
if ! command -v chromedriver >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "ensure-deps: installing chromium and chromium-driver for the dashboard's browser tests"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
    else
        echo "ensure-deps: chromedriver is missing for the dashboard tests: sudo apt-get install chromium chromium-driver" >&2
        exit 1
    fi
fi

if ! command -v java >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "ensure-deps: installing Java 17 for the Spark connector's tests"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null
    else
        echo "ensure-deps: java (17) is missing for the Spark tests: sudo apt-get install openjdk-17-jre-headless" >&2
        exit 1
    fi
fi

# promtool checks docs/prometheus/alerts.yml (tests/ops/test_monitoring_files.py): the binary
# taken out of Debian's prometheus package, not the package itself (a server and its service).
# Optional: without it that test checks the rules' YAML only.
if ! command -v promtool >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "ensure-deps: installing promtool from Debian's prometheus package"
    tmp=$(mktemp -d)
    if (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; }; }) \
        && dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"; then
        install -m 755 "$tmp/x/usr/bin/promtool" /usr/local/bin/promtool
    else
        echo "ensure-deps: promtool could not be installed; the alert rules get a YAML check only" >&2
    fi
    rm -rf "$tmp"
fi

echo "ensure-deps: installing the Python package and every extra (test, spark, ops, migrate, build, docs)"
"$PY" -m pip install -q --disable-pip-version-check -e '.[test,spark,ops,migrate,build,docs]' 2>&1 | grep -v -i "running pip as the 'root' user" || true
"$PY" -c "import pgmq_build, pglast, psycopg, pytest_postgresql, hypothesis, pgmq, pyspark, pyarrow, pyspark_pgmq, rich, prometheus_client, selenium, mkdocs, material, yaml" \
    || { echo "ensure-deps: Python dependencies failed to install" >&2; exit 1; }
