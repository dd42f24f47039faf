"""Checks a built tessera image from its OCI config and its mounted root filesystem (scripts/image.sh).

Prints one line per check and exits 1 if any fails: the user is 65532 and not root, the entry
point is `tessera`, there is no HEALTHCHECK, exactly the runtime lock's distributions (plus
tessera) are installed, none of their test suites, no package manager (apt, dpkg, pip), a valid
CycloneDX SBOM naming every installed distribution, nothing outside /tmp is writable by 65532, and
`tessera --version`, `tessera operator --help` and `tessera plan` (the solver, numpy and scipy
loaded) run as 65532 on a read-only bind of the root (unshare + chroot).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

UID = 65532
PACKAGE_MANAGERS = ("apt", "apt-get", "apt-cache", "dpkg", "dpkg-query", "pip", "pip3", "pip3.11")
BIN_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin", "opt/tessera/bin")
SBOM = "opt/tessera/share/sbom.cdx.json"


def locked(lock: Path) -> set[str]:
    return {m[1].lower().replace("_", "-") for m in re.finditer(r"^([A-Za-z0-9_.-]+)==", lock.read_text(), re.M)}


def installed(root: Path) -> set[str]:
    return {re.sub(r"-[^-]+\.dist-info$", "", p.name).lower().replace("_", "-")
            for p in site_packages(root).glob("*.dist-info")}


def site_packages(root: Path) -> Path:
    return next((root / "opt/tessera/lib").glob("python3*/site-packages"))


def package_managers(root: Path) -> list[str]:
    return [f"/{d}/{name}" for d in BIN_DIRS for name in PACKAGE_MANAGERS if os.path.lexists(root / d / name)]


def test_suites(root: Path) -> list[str]:
    site = site_packages(root)
    found = [p for p in site.rglob("*") if p.is_dir() and p.name in ("test", "tests") and p.parent != site]
    return [str(p.relative_to(site)) for p in found] + (["kubernetes/aio"] if (site / "kubernetes/aio").exists() else [])


def sbom_gaps(root: Path) -> str:
    """What the SBOM misses: an installed distribution it does not list (name and version), or Debian's."""
    path = root / SBOM
    if not path.is_file():
        return f"no {SBOM}"
    bom = json.loads(path.read_text())
    if bom.get("bomFormat") != "CycloneDX":
        return "not CycloneDX"
    # tessera itself is the SBOM's subject (metadata.component), its dependencies the components.
    components = bom.get("components", []) + [bom.get("metadata", {}).get("component", {})]
    listed = {(c.get("name", "").lower().replace("_", "-"), c.get("version")) for c in components}
    dists = {(m[1].lower().replace("_", "-"), m[2]) for p in site_packages(root).glob("*.dist-info")
             if (m := re.match(r"(.+)-([^-]+)\.dist-info$", p.name))}
    unlisted = sorted(f"{n}=={v}" for n, v in dists - listed)
    debian = [c for c in bom.get("components", []) if c.get("purl", "").startswith("pkg:deb/debian/")]
    if unlisted or not debian:
        return f"unlisted {unlisted[:5]}, {len(debian)} Debian packages"
    return ""


def writable_by_uid(root: Path) -> list[str]:
    found = []
    for directory, _dirs, _files in os.walk(root):
        rel = "/" + os.path.relpath(directory, root)
        if rel.startswith(("/proc", "/sys", "/dev", "/tmp", "/var/tmp", "/run/lock")) or rel == "/.":
            continue
        stat = os.lstat(directory)
        if stat.st_uid == UID or stat.st_mode & 0o002:
            found.append(rel)
    return found


def run_as_uid(root: Path, *args: str) -> subprocess.CompletedProcess:
    """The image's entry point as UID 65532 on a read-only root: a private mount namespace, no runtime.

    As a container runtime does: /proc, /dev with a tmpfs /dev/shm (Python's multiprocessing locks live
    there), and /tmp as the chart's emptyDir; everything else read-only.
    """
    script = (f"mount --bind {root} {root} && mount -o remount,bind,ro {root} && "
              f"mount -t tmpfs tmpfs {root}/tmp && mount -t proc proc {root}/proc && "
              f"mount --rbind /dev {root}/dev && mount -t tmpfs -o size=64m shm {root}/dev/shm && "
              f"exec chroot --userspec={UID}:{UID} {root} /usr/bin/env -i PATH=/opt/tessera/bin:/usr/bin:/bin "
              f"HOME=/tmp PYTHONSAFEPATH=1 PYTHONDONTWRITEBYTECODE=1 tessera {' '.join(args)}")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120)


def main(inspect_json: str, root_dir: str, lock_file: str) -> int:
    info = json.loads(Path(inspect_json).read_text())
    config = info["OCIv1"]["config"]
    root = Path(root_dir)
    checks: list[tuple[str, bool, str]] = []
    checks.append(("user is 65532, not root", config.get("User") == f"{UID}:{UID}", str(config.get("User"))))
    checks.append(("entry point is tessera", config.get("Entrypoint") == ["tessera"], str(config.get("Entrypoint"))))
    checks.append(("no HEALTHCHECK", "Healthcheck" not in json.dumps(info.get("Docker", {}).get("config", {})), ""))
    extra = installed(root) - locked(Path(lock_file)) - {"tessera"}
    missing = locked(Path(lock_file)) - installed(root)
    checks.append(("only the runtime lock's packages", not extra and not missing,
                   f"extra {sorted(extra)} missing {sorted(missing)}"))
    managers = package_managers(root)
    checks.append(("no package manager", not managers, str(managers)))
    suites = test_suites(root)
    checks.append(("no test suites of the dependencies", not suites, str(suites[:5])))
    gaps = sbom_gaps(root)
    checks.append(("SBOM lists every installed distribution and the Debian packages", not gaps, gaps))
    labels = config.get("Labels") or {}
    checks.append(("OCI labels", all(f"org.opencontainers.image.{k}" in labels for k in ("version", "revision", "source")),
                   str(sorted(labels))))
    setuid = [str(p.relative_to(root)) for p in root.rglob("*")
              if not p.is_symlink() and p.is_file() and p.stat().st_mode & 0o6000]
    checks.append(("no setuid or setgid file", not setuid, str(setuid[:5])))
    writable = writable_by_uid(root)
    checks.append(("nothing writable by 65532 outside /tmp", not writable, str(writable[:5])))
    version = run_as_uid(root, "--version")
    checks.append(("tessera --version as 65532 on a read-only root", version.returncode == 0,
                   (version.stdout + version.stderr).strip()[-300:]))
    operator = run_as_uid(root, "operator", "--help")
    checks.append(("tessera operator --help as 65532 on a read-only root",
                   operator.returncode == 0 and "--lease-duration" in operator.stdout,
                   (operator.stderr.strip() or "ok")[-300:]))
    plan = run_as_uid(root, "plan", "--gpus", "4")
    checks.append(("tessera plan (the built-in examples) as 65532 on a read-only root",
                   plan.returncode == 0 and "slices" in plan.stdout,
                   (plan.stderr.strip() or "ok")[-300:]))
    size = subprocess.run(["du", "-sm", str(root)], capture_output=True, text=True).stdout.split()[0]
    print(f"image root filesystem: {size} MB")
    for name, ok, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
