"""Build the two Lambda layers on the local machine, without Docker.

* The dependencies layer is ``pip install --platform <manylinux tag> --only-binary=:all:
  --python-version <X.Y> --implementation cp --target <dir>/python`` of the runtime
  dependencies in ``pyproject.toml``: pip picks the wheels built for Lambda's architecture and
  Python version, whatever machine runs the build. The Python 3.12+ runtimes run on Amazon
  Linux 2023 (glibc 2.34), so ``manylinux_2_28`` wheels are allowed besides ``manylinux2014``;
  recent psycopg2-binary releases ship aarch64 wheels only for the former.
* The ``tidings`` layer is a copy of ``layers/tidings/tidings`` under ``python/``.

Each layer is built into ``build/layers/<name>-<key>/`` where the key hashes everything that
decides its content (pinned requirements, platform and Python version for the dependencies;
the source files for ``tidings``). An existing directory for a key is reused as is, so after
the first build a synth needs no network. ``python -m infra.build_layers`` builds both.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = REPO_ROOT / "pyproject.toml"
TIDINGS_SOURCE = REPO_ROOT / "layers" / "tidings" / "tidings"
BUILD_ROOT = REPO_ROOT / "build" / "layers"

# The Lambda Python runtime ships these (and their own dependency s3transfer); packing them again
# would only add size and pin versions the runtime already manages.
PROVIDED_BY_RUNTIME = frozenset({"boto3", "botocore", "s3transfer"})

# Files that never belong in a layer.
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".mypy_cache")

# Bump when the way a layer is built changes, so old cached builds are not reused.
_BUILD_FORMAT = "1"


class LayerBuildError(RuntimeError):
    """A layer could not be built; the message says which and why."""


@dataclass(frozen=True, slots=True)
class LambdaPlatform:
    """The Lambda architecture and Python version that wheels must match."""

    python_version: str = "3.12"
    pip_platforms: tuple[str, ...] = ("manylinux_2_28_aarch64", "manylinux2014_aarch64")

    @property
    def abi(self) -> str:
        return "cp" + self.python_version.replace(".", "")


@dataclass(frozen=True, slots=True)
class BuiltLayers:
    """Directories ready to be an asset: each holds ``python/`` at its root."""

    dependencies: Path
    tidings: Path


def runtime_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    """The ``[project].dependencies`` of ``pyproject.toml``, minus what the runtime provides."""
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        declared: list[str] = list(project["dependencies"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise LayerBuildError(
            f"cannot read [project].dependencies from {pyproject}: {exc}"
        ) from exc
    return [req for req in declared if _distribution(req) not in PROVIDED_BY_RUNTIME]


def _distribution(requirement: str) -> str:
    """The normalised distribution name of a requirement such as ``"pkg[extra]==1.0"``."""
    name = re.split(r"[\[<>=!~;@\s]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def build_layers(
    platform: LambdaPlatform | None = None,
    build_root: Path = BUILD_ROOT,
    pyproject: Path = PYPROJECT,
    tidings_source: Path = TIDINGS_SOURCE,
) -> BuiltLayers:
    """Build (or reuse) both layers and return their directories."""
    target = platform or LambdaPlatform()
    return BuiltLayers(
        dependencies=build_dependencies_layer(target, build_root, pyproject),
        tidings=build_tidings_layer(build_root, tidings_source),
    )


def build_dependencies_layer(
    platform: LambdaPlatform, build_root: Path = BUILD_ROOT, pyproject: Path = PYPROJECT
) -> Path:
    requirements = runtime_requirements(pyproject)
    key = _digest(
        json.dumps(
            {
                "format": _BUILD_FORMAT,
                "requirements": requirements,
                "python": platform.python_version,
                "platforms": list(platform.pip_platforms),
            },
            sort_keys=True,
        ).encode()
    )
    final = build_root / f"dependencies-{key}"
    if (final / "python").is_dir():
        return final
    build_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=build_root, prefix=".dependencies-") as scratch:
        staging = Path(scratch) / "layer"
        command = [
            sys.executable, "-m", "pip", "install",
            "--quiet", "--disable-pip-version-check", "--no-compile",
            *(arg for tag in platform.pip_platforms for arg in ("--platform", tag)),
            "--only-binary=:all:",
            "--python-version", platform.python_version,
            "--implementation", "cp",
            "--abi", platform.abi,
            "--target", str(staging / "python"),
            *requirements,
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0:
            raise LayerBuildError(
                "pip could not build the dependencies layer for "
                f"{', '.join(platform.pip_platforms)} / Python {platform.python_version} "
                f"(exit {result.returncode}):\n{result.stderr.strip()}"
            )
        _drop_runtime_packages(staging / "python")
        _publish(staging, final)
    return final


def build_tidings_layer(build_root: Path = BUILD_ROOT, source: Path = TIDINGS_SOURCE) -> Path:
    if not (source / "__init__.py").is_file():
        raise LayerBuildError(f"the tidings package is missing: no {source / '__init__.py'}")
    key = _digest(_BUILD_FORMAT.encode() + tree_digest(source).encode())
    final = build_root / f"tidings-{key}"
    if (final / "python" / "tidings").is_dir():
        return final
    build_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=build_root, prefix=".tidings-") as scratch:
        staging = Path(scratch) / "layer"
        shutil.copytree(source, staging / "python" / "tidings", ignore=_IGNORED)
        _publish(staging, final)
    return final


def tree_digest(root: Path, pattern: str = "**/*") -> str:
    """A hash of the relative paths and contents of the files matching ``pattern`` under ``root``.

    A missing ``root`` hashes like an empty one.
    """
    digest = hashlib.sha256()
    for path in sorted(p for p in root.glob(pattern) if p.is_file()):
        relative = path.relative_to(root)
        if "__pycache__" in relative.parts or path.suffix in {".pyc", ".pyo"}:
            continue
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _drop_runtime_packages(site: Path) -> None:
    for entry in site.iterdir():
        distribution = entry.name.split("-")[0].lower() if entry.suffix == ".dist-info" else ""
        if entry.name.lower() in PROVIDED_BY_RUNTIME or distribution in PROVIDED_BY_RUNTIME:
            shutil.rmtree(entry)
    bin_dir = site / "bin"
    if bin_dir.is_dir():
        shutil.rmtree(bin_dir)


def _publish(staging: Path, final: Path) -> None:
    """Move a finished build into place; a concurrent build of the same key may have won."""
    if final.exists():
        return
    staging.rename(final)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


if __name__ == "__main__":
    built = build_layers()
    print(f"dependencies layer: {built.dependencies}")
    print(f"tidings layer:      {built.tidings}")
