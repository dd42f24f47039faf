"""Real weight stores for the fetcher's tests, on this machine: an HTTPS server and moto's S3 server.

- `https_store`: Python's HTTP server behind TLS with a certificate made here
  by openssl for 127.0.0.1; the fetcher trusts it through `SSL_CERT_FILE`, the
  standard way to give OpenSSL (and so urllib) another CA, as in a pod.
- `s3_store`: moto's server mode (`moto_server`, a real S3 HTTP API in a
  process of its own); the fetcher reaches it through boto3's standard
  environment (`AWS_ENDPOINT_URL`, keys), as a pod gets it from its Secret.
"""

from __future__ import annotations

import functools
import io
import os
import ssl
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cluster.weights_store import S3_ENV, free_port, wait_listening

ADAPTER_FILES = {"adapter_config.json": b'{"r": 8, "lora_alpha": 16}', "adapter_model.safetensors": b"\x00" * 4096}


def write_files(folder: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


def tar_of(files: dict[str, bytes], gzip: bool = True) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if gzip else "w") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def https_store(root: Path, certs: Path) -> Iterator[str]:
    """Serves `root` over HTTPS on 127.0.0.1; yields its base URL. Sets SSL_CERT_FILE while it runs."""
    cert, key = certs / "cert.pem", certs / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    before = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = str(cert)
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        if before is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = before


@contextmanager
def s3_store() -> Iterator[dict[str, str]]:
    """moto's S3 server in its own process; yields the environment that points boto3 at it."""
    port = free_port()
    moto = Path(sys.executable).parent / "moto_server"
    process = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, process, "moto_server")
        yield {**S3_ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    finally:
        process.terminate()
        process.wait(10)


def s3_put(env: dict[str, str], bucket: str, prefix: str, files: dict[str, bytes]) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    for rel, data in files.items():
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=data)
