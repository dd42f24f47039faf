"""Completes the image's CycloneDX SBOM with the base's Debian packages (run inside the image build).

cyclonedx-py (requirements/sbom.lock) lists the Python environment; the Debian packages the image
keeps come from dpkg, which the build removes right after this step (no package manager in the
image), so they are recorded here while dpkg can still say what is installed. Each one becomes a
`library` component with its Package URL (`pkg:deb/debian/NAME@VERSION?arch=...`), and the result
is validated against the CycloneDX schema before it is written, so a malformed SBOM fails the build.

    python image_sbom.py PYTHON_SBOM OUTPUT [PACKAGE_LEFT_OUT ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

QUERY = "${Package}\t${Version}\t${Architecture}\n"


def debian_packages(left_out: set[str]) -> list[dict]:
    listed = subprocess.run(["dpkg-query", "-W", "-f", QUERY], check=True, capture_output=True, text=True).stdout
    components = []
    for line in sorted(listed.splitlines()):
        name, version, arch = line.split("\t")
        if name in left_out:
            continue
        purl = PackageURL(type="deb", namespace="debian", name=name, version=version,
                          qualifiers={"arch": arch}).to_string()
        components.append({"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl})
    return components


def main(python_sbom: str, output: str, *left_out: str) -> int:
    bom = json.loads(Path(python_sbom).read_text())
    bom["components"] = bom.get("components", []) + debian_packages(set(left_out))
    text = json.dumps(bom, indent=2, sort_keys=True) + "\n"
    error = JsonStrictValidator(SchemaVersion.from_version(bom["specVersion"])).validate_str(text)
    if error is not None:
        print(f"image_sbom: the SBOM is not valid CycloneDX {bom['specVersion']}: {error}", file=sys.stderr)
        return 1
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
