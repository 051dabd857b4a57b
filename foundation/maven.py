"""Fetch jars from Maven Central once into a local cache.

The local Kafka broker and Spark's Kafka connector are both plain jars on Maven Central. Maven
resolves their transitive runtime dependencies for us; we only write a throw-away POM and ask the
dependency plugin to copy everything into a cache folder, which later runs reuse as it is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

# Maven 3.8 ships an old dependency plugin; name a current one explicitly.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
COMPLETE_MARKER = ".complete"


class MavenError(RuntimeError):
    """Maven is missing or could not fetch the jars."""


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str | None = None  # None: the version comes from an imported BOM
    kind: str = "jar"  # "pom" for a BOM import
    exclusions: tuple[tuple[str, str], ...] = ()  # (group, artifact) not to bring in

    def xml(self, extra: str = "") -> str:
        version = f"<version>{escape(self.version)}</version>" if self.version else ""
        kind = f"<type>{self.kind}</type>" if self.kind != "jar" else ""
        excluded = "".join(
            f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId>"
            "</exclusion>"
            for g, a in self.exclusions
        )
        if excluded:
            extra += f"<exclusions>{excluded}</exclusions>"
        return (
            f"<dependency><groupId>{escape(self.group)}</groupId>"
            f"<artifactId>{escape(self.artifact)}</artifactId>{version}{kind}{extra}</dependency>"
        )


def cache_root() -> Path:
    """Where fetched jars live: `KPD_CACHE_DIR`, else the XDG cache folder."""
    configured = os.environ.get("KPD_CACHE_DIR")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kpd"


def _pom(dependencies: Sequence[Artifact], boms: Sequence[Artifact]) -> str:
    managed = "".join(bom.xml("<scope>import</scope>") for bom in boms)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kpd</groupId>
  <artifactId>kpd-jar-fetch</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement><dependencies>{managed}</dependencies></dependencyManagement>
  <dependencies>{"".join(d.xml() for d in dependencies)}</dependencies>
</project>
"""


def fetch_jars(name: str, dependencies: Sequence[Artifact], boms: Sequence[Artifact] = ()) -> Path:
    """Return a folder holding the runtime jars of `dependencies`, downloading them only once."""
    target = cache_root() / name
    if (target / COMPLETE_MARKER).exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError(
            "Maven (mvn) is not on PATH; install it (e.g. `apt-get install maven`) so kpd can "
            f"fetch {name} from Maven Central"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kpd-mvn-") as work:
        staging = Path(work) / "jars"
        (Path(work) / "pom.xml").write_text(_pom(dependencies, boms))
        result = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staging}",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            tail = (result.stdout + result.stderr)[-2000:]
            raise MavenError(f"mvn could not fetch {name} (exit {result.returncode}):\n{tail}")
        (staging / COMPLETE_MARKER).write_text("fetched by kpd\n")
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(staging), target)
    return target
