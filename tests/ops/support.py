"""Helpers of the operations tests: the command line as a process, scraping /metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Prometheus text -> {(sample name, sorted labels): value}."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return samples(response.read().decode())


def q(name: str, **labels: str) -> tuple[tuple[str, str], ...]:
    """The label key of a queue's sample."""
    return tuple(sorted({"queue": name, **labels}.items()))


def spawn(*args: str, **kw) -> subprocess.Popen:
    """`pgmq-build ARGS...` as a process running this checkout's code."""
    env = dict(os.environ, PYTHONPATH=str(REPO), **kw.pop("env", {}))
    return subprocess.Popen([sys.executable, "-m", "pgmq_build", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def stop(proc: subprocess.Popen, timeout: float = 15) -> tuple[int, str]:
    """SIGTERM, then its exit status and stderr."""
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err
