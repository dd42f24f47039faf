"""Checks a built tessera image from its OCI config and its mounted root filesystem (scripts/image.sh).

Prints one line per check and exits 1 if any fails: the user is 65532 and not root, the entry
point is `tessera`, there is no HEALTHCHECK, exactly the runtime lock's distributions (plus
tessera) are installed, nothing outside /tmp is writable by 65532, and `tessera --version` and
`tessera operator --help` run as 65532 on a read-only bind of the root (unshare + chroot).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

UID = 65532


def locked(lock: Path) -> set[str]:
    return {m[1].lower().replace("_", "-") for m in re.finditer(r"^([A-Za-z0-9_.-]+)==", lock.read_text(), re.M)}


def installed(root: Path) -> set[str]:
    site = next((root / "opt/tessera/lib").glob("python3*/site-packages"))
    return {re.sub(r"-[^-]+\.dist-info$", "", p.name).lower().replace("_", "-") for p in site.glob("*.dist-info")}


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
    size = subprocess.run(["du", "-sm", str(root)], capture_output=True, text=True).stdout.split()[0]
    print(f"image root filesystem: {size} MB")
    for name, ok, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
