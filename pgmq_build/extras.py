"""The optional parts of the package and the extra that brings each (pyproject.toml's
[project.optional-dependencies]): a command whose extra is not installed says which one to
install instead of failing with an ImportError."""

from __future__ import annotations

# import name -> the extra that installs it, per use: jinja2 renders the dashboard's pages (ops)
# and the SQL templates (build); pglast parses SQL for the build tools and for migrate.
EXTRA_OF_MODULE = {
    "rich": "ops", "prometheus_client": "ops",
    "jinja2": "build", "pglast": "build",
    "pyspark": "spark", "pandas": "spark", "pyarrow": "spark", "numpy": "spark",
}
# commands whose use of a shared module comes with another extra than EXTRA_OF_MODULE says
EXTRA_OF_COMMAND = {"dashboard": "ops", "migrate": "migrate", "demo": "migrate"}


class MissingExtra(Exception):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, what: str, module: str, extra: str) -> None:
        super().__init__(f"{what} needs the Python package {module!r}, which is not installed: "
                         f"pip install 'pgmq-build[{extra}]'")
        self.module, self.extra = module, extra


def missing_extra(exc: ImportError, what: str, command: str | None = None) -> MissingExtra | None:
    """The MissingExtra an ImportError means, or None when it is not about an optional module
    (a real bug then: let it propagate)."""
    module = (getattr(exc, "name", None) or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    if command in EXTRA_OF_COMMAND and extra != "spark":
        extra = EXTRA_OF_COMMAND[command]
    return MissingExtra(what, module, extra)
