"""Fetch one pinned weights source into a local directory, and check its digest before anyone reads it.

Supported sources (docs/weights.md):

- `https://host/path`: a tar archive (plain or gzip-compressed), unpacked with
  Python's `data` filter (no absolute paths, no `..`, no devices, no links out).
- `s3://bucket/prefix`: every object under the prefix (as a folder: `prefix/`),
  by boto3 with the standard AWS environment (`AWS_ACCESS_KEY_ID`,
  `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL` for any
  S3-compatible store), which the pool's credentialsSecretRef provides.
- `pvc://claim/path`: the folder `path` of a PersistentVolumeClaim the pod
  mounts read-only at `<sources>/pvc/<claim>`.

`gs://`, `hf://` and `oci://` are named by the API but not fetched yet: such a
pool is Invalid (`unsupported_scheme`), nothing fakes them.

Everything is written into a staging folder beside the destination, checked
against the pinned digest, and only then renamed into place: a copy that does
not match is deleted and never visible at the destination.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from tessera.weights.digest import CHUNK, WeightsError, directory_digest

SUPPORTED = ("https", "s3", "pvc")
NOT_YET = ("gs", "hf", "oci")
HTTP_TIMEOUT_S = 60.0


def scheme_of(uri: str) -> str:
    return uri.split("://", 1)[0]


def unsupported_scheme(uri: str) -> str | None:
    """Why `uri` cannot be fetched (a scheme the API names that tessera does not fetch yet), else None."""
    scheme = scheme_of(uri)
    if scheme in SUPPORTED:
        return None
    return f"{scheme}:// weights are not supported yet (supported: {', '.join(s + '://' for s in SUPPORTED)})"


def pvc_parts(uri: str) -> tuple[str, str]:
    """(claim, folder inside it) of a pvc:// URI."""
    parts = urlsplit(uri)
    folder = PurePosixPath(parts.path.lstrip("/"))
    if not parts.netloc or ".." in folder.parts:
        raise WeightsError(f"{uri}: a pvc:// URI is pvc://<claim>/<folder>, without '..'")
    return parts.netloc, folder.as_posix() if folder.parts else ""


def pvc_path(uri: str, sources: Path) -> Path:
    """Where the pod mounts a pvc:// source's folder."""
    claim, folder = pvc_parts(uri)
    return sources / "pvc" / claim / folder


def verify(folder: Path, digest: str, uri: str) -> None:
    found = directory_digest(folder)
    if found != digest:
        raise WeightsError(f"digest mismatch for {uri}: its files have {found}, the spec pins {digest}; not used")


def fetch(uri: str, digest: str, dest: Path, sources: Path) -> None:
    """Puts the files of `uri`, checked against `digest`, at `dest` (replacing what was there)."""
    reason = unsupported_scheme(uri)
    if reason is not None:
        raise WeightsError(reason)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        download(uri, staging, sources)
        verify(staging, digest, uri)
        replace(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def download(uri: str, into: Path, sources: Path) -> None:
    scheme = scheme_of(uri)
    try:
        if scheme == "https":
            download_archive(uri, into)
        elif scheme == "s3":
            download_s3(uri, into)
        else:
            copy_folder(pvc_path(uri, sources), into, uri)
    except WeightsError:
        raise
    except (OSError, tarfile.TarError, ValueError) as error:
        raise WeightsError(f"fetching {uri}: {error}") from None


def download_archive(uri: str, into: Path) -> None:
    with tempfile.TemporaryFile(dir=into.parent) as archive:
        with urllib.request.urlopen(uri, timeout=HTTP_TIMEOUT_S) as response:
            shutil.copyfileobj(response, archive, CHUNK)
        archive.seek(0)
        with tarfile.open(fileobj=archive, mode="r:*") as tar:
            tar.extractall(into, filter="data")


def download_s3(uri: str, into: Path) -> None:
    import boto3  # only the fetcher needs it
    from botocore.exceptions import BotoCoreError, ClientError

    parts = urlsplit(uri)
    bucket, prefix = parts.netloc, parts.path.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    s3 = boto3.client("s3")
    found = 0
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                rel = PurePosixPath(item["Key"][len(prefix):])
                if item["Key"].endswith("/"):
                    continue  # a folder marker, no file
                if ".." in rel.parts or rel.is_absolute():
                    raise WeightsError(f"{uri}: object {item['Key']!r} would land outside the folder")
                target = into.joinpath(*rel.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, item["Key"], str(target))
                found += 1
    except (BotoCoreError, ClientError) as error:
        raise WeightsError(f"fetching {uri}: {error}") from None
    if not found:
        raise WeightsError(f"fetching {uri}: no objects under s3://{bucket}/{prefix}")


def copy_folder(source: Path, into: Path, uri: str) -> None:
    if not source.is_dir():
        raise WeightsError(f"fetching {uri}: {source} is not a folder (is the claim mounted?)")
    shutil.copytree(source, into, symlinks=True, dirs_exist_ok=True)


def replace(staging: Path, dest: Path) -> None:
    """Renames the checked copy into place; an older copy is moved aside first and deleted after."""
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
        os.replace(dest, old / "copy")
    os.replace(staging, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
