"""The digest of a directory of weights: what `weights.digest` pins and `tessera weights digest` prints.

`sha256:` and the sha256 of one line per regular file under the directory,
`<sha256 of the file, 64 hex>  <path relative to the directory, / separated>\n`,
sorted by the path's UTF-8 bytes: `sha256sum`'s own output format, so the
digest can be checked without tessera (docs/weights.md). Empty directories
do not count; a link or any other non-regular file is refused (a link could
point anywhere on the server's filesystem, outside what the digest covers).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

CHUNK = 1 << 20


class WeightsError(Exception):
    """Weights that cannot be used: the message names the source and the reason."""


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def files_of(root: Path) -> list[str]:
    """The regular files under `root`, as relative /-separated paths sorted by their UTF-8 bytes."""
    if not root.is_dir():
        raise WeightsError(f"{root}: not a directory")
    found = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise WeightsError(f"{path}: not a regular file or directory (links are refused)")
            if stat.S_ISREG(mode):
                found.append(path.relative_to(root).as_posix())
    return sorted(found, key=lambda p: p.encode())


def manifest(root: Path) -> str:
    """sha256sum's lines for every file under `root`, in digest order."""
    return "".join(f"{file_sha256(root / rel)}  {rel}\n" for rel in files_of(root))


def directory_digest(root: Path) -> str:
    """`sha256:<64 hex>` of `root`'s files (the module's docstring has the rule)."""
    return "sha256:" + hashlib.sha256(manifest(root).encode()).hexdigest()
