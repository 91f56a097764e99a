"""pgmq_build: generates, checks, installs and drives the pgmq PostgreSQL extension."""

from .manifest import VERSION as __version__

__all__ = ["__version__"]
