"""`python3 -m bench contention` (bench/contention.py): a short sweep on the
test server proves the harness (pgbench per point, the refiller, the metered window, the
tables and the plot); no timing is asserted."""

from __future__ import annotations

import json

import numpy
import pytest
from matplotlib import image

from bench import contention

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_short_sweep_reports_every_point_and_plots(dsn, tmp_path, capsys):
    png, out, js = tmp_path / "sweep.png", tmp_path / "sweep.md", tmp_path / "sweep.json"
    args = contention.parse_args([
        "--consumers", "1,4", "--seconds", "2", "--prefill", "20000",
        "--series", "raw,upstream_pop,ours_read_delete",
        "--plot", str(png), "--out", str(out), "--json", str(js)])
    assert contention.run(args, dsn, "the test server") == 0
    printed = capsys.readouterr().out
    assert "| msgs/s by consumers | 1 | 4 |" in printed
    assert out.read_text() == printed.rstrip("\n") + "\n"
    points = json.loads(js.read_text())["points"]
    assert [(p["series"], p["consumers"]) for p in points] == [
        (s, n) for n in (1, 4) for s in ("raw", "upstream pop", "ours read+delete")]
    for p in points:
        assert p["msgs"] > 0 and p["failed"] == 0, p
        assert p["p99_ms"] >= p["p50_ms"] > 0, p
        assert p["cpu_us_per_msg"] is not None and p["cpu_us_per_msg"] > 0, p  # a local server
    data = png.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    pixels = image.imread(str(png))
    assert pixels.shape[0] >= 400 and pixels.shape[1] >= 400
    # lines in several colours on a white page, not a blank picture
    colours = numpy.unique(pixels.reshape(-1, pixels.shape[-1]).round(2), axis=0)
    assert len(colours) > 20
    assert (pixels[..., :3] < 0.5).mean() > 0.001


def test_queue_stays_full_through_a_point(dsn, tmp_path):
    """The refiller keeps the queue topped up: no read comes back empty (read + delete's \\gset
    would abort pgbench, which run() reports as an error). Four consumers of the test server
    (fsync off) take ~20,000 messages a second on a quiet machine: with 2,000 queued (refilled
    by 1,000) they emptied the queue within the first second."""
    js = tmp_path / "point.json"
    args = contention.parse_args(["--consumers", "4", "--seconds", "3", "--prefill", "20000",
                                  "--series", "ours_read_unordered_delete", "--json", str(js)])
    contention.run(args, dsn, "the test server")  # raises if a pgbench client aborted
    assert json.loads(js.read_text())["points"][0]["msgs"] > 0


@pytest.mark.parametrize("argv", [["--consumers", "0"], ["--consumers", "x"], ["--seconds", "1"],
                                  ["--prefill", "10"], ["--series", "nope"],
                                  ["--dsn", "host=x port=notaport ="]])
def test_refuses_bad_options(argv):
    with pytest.raises(SystemExit) as exc:
        contention.parse_args(argv)
    assert exc.value.code == 2
