"""The file names of the extension's scripts. Its own module so that installing and migrating
(the runtime) do not import the renderer and its build-only dependencies (jinja2, pglast)."""

from __future__ import annotations

from .manifest import MANIFEST, Manifest


def install_name(version: str, target: str = "extension") -> str:
    return f"pgmq--{version}.sql" if target == "extension" else f"pgmq-standalone--{version}.sql"


def upgrade_name(old: str, new: str, target: str = "extension") -> str:
    return f"pgmq--{old}--{new}.sql" if target == "extension" else f"pgmq-standalone--{old}--{new}.sql"


def standalone_name(manifest: Manifest = MANIFEST) -> str:
    return install_name(manifest.version, "standalone")


def bridge_names(manifest: Manifest = MANIFEST) -> list[str]:
    """The extension's bridges from each upstream PGMQ version to manifest.bridge (comments only:
    manifest.UPSTREAM_BRIDGE says why), in UPSTREAM_VERSIONS order."""
    return [upgrade_name(u, manifest.bridge) for u in manifest.upstream]


def upstream_step_name(target: str = "extension", manifest: Manifest = MANIFEST) -> str:
    """The one step from upstream PGMQ (manifest.bridge) into this version."""
    return upgrade_name(manifest.bridge, manifest.version, target)
