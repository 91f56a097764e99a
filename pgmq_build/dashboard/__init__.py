"""`pgmq-build dashboard`: a small web app over pgmq.queue_metrics(), pgmq.browse() and the
admin routines, on the standard library's HTTP server with jinja2 templates (README:
Dashboard). app.py holds the pages and the safety rules, web.py the HTTP plumbing,
sampler.py the in-memory history, charts.py the SVG, queries.py every statement."""

from .app import Dashboard, run

__all__ = ["Dashboard", "run"]
