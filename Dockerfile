# tessera: the operator, the planner CLI and the profiler in one image.
# Only requirements/runtime.lock goes in (exact versions, hashes; no offline extras). The build stage
# has a C compiler, so the twin's kernel is compiled into the package. The image runs as UID 65532
# with a read-only root filesystem: it writes nothing outside /tmp (an emptyDir in the chart), and
# Python's bytecode is compiled at build time. No HEALTHCHECK: Kubernetes ignores it; the chart's
# probes call the operator's /healthz and /readyz.
#
# PYTHON_IMAGE: any Debian-based image with python3.11 and python3 -m venv; the default is the
# official one (pin it by digest in production). scripts/image.sh builds it daemonless with buildah.
ARG PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# gcc and libc6-dev only compile the twin's kernel; versions come from the pinned base's Debian release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/tessera
# Only for a build machine behind a TLS-inspecting proxy: its CA bundle, mounted for the build
# (scripts/image.sh); unset, pip trusts its own bundle. Nothing of it stays in the image.
ARG PIP_CERT
WORKDIR /src
COPY requirements/runtime.lock requirements/sbom.lock requirements/
# The dependencies' own test suites, and the Kubernetes client's asyncio copy (kubernetes.aio: tessera
# and kopf use the synchronous client and aiohttp), are never imported at run time (about 150 MB).
RUN /opt/tessera/bin/pip install --no-cache-dir --require-hashes -r requirements/runtime.lock \
    && find /opt/tessera/lib/python3*/site-packages -depth -mindepth 2 -type d \( -name tests -o -name test \) \
        -exec rm -rf {} + \
    && rm -rf /opt/tessera/lib/python3*/site-packages/kubernetes/aio
# CycloneDX's generator, in its own environment: it only writes the SBOM in the final stage.
RUN python3 -m venv /opt/sbom \
    && /opt/sbom/bin/pip install --no-cache-dir --require-hashes -r requirements/sbom.lock
COPY pyproject.toml setup.py README.md ./
COPY tessera tessera
COPY planner planner
COPY operator operator
COPY profiler-job profiler-job
COPY frontend frontend
COPY examples examples
COPY crds crds
# pip and setuptools only install: nothing runs them in the image.
RUN /opt/tessera/bin/pip install --no-cache-dir --no-deps . \
    && /opt/tessera/bin/python -P -m compileall -q /opt/tessera/lib \
    && /opt/tessera/bin/tessera --version \
    && /opt/tessera/bin/python -P -m pip uninstall --yes --quiet pip setuptools

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="tessera" \
      org.opencontainers.image.description="The tessera operator, planner CLI and profiler" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://tessera.invalid/"
COPY --from=build /opt/tessera /opt/tessera
COPY --from=build /opt/sbom /opt/sbom
COPY pyproject.toml scripts/image_sbom.py /opt/sbom/
# One RUN, and scripts/image.sh squashes the image, so that what it deletes is gone, not hidden:
# - the SBOM (/opt/tessera/share/sbom.cdx.json): the Python environment, then the Debian packages
#   that stay, recorded while dpkg can still list them;
# - no package manager: apt purged, then dpkg's own files and database deleted (it is Essential, so
#   it cannot purge itself), with the docs, manuals and locales nothing reads;
# - no setuid or setgid binary (su, passwd, mount, ...): nothing in the image may gain privileges.
RUN dpkg --purge --force-remove-essential --force-depends apt libapt-pkg6.0 gpgv debian-archive-keyring \
    && /opt/sbom/bin/python -m cyclonedx_py environment --pyproject /opt/sbom/pyproject.toml \
        --output-reproducible -o /opt/sbom/python.cdx.json /opt/tessera/bin/python \
    && /opt/sbom/bin/python /opt/sbom/image_sbom.py /opt/sbom/python.cdx.json /opt/tessera/share/sbom.cdx.json dpkg \
    && rm -rf /opt/sbom /var/lib/dpkg /var/lib/apt /var/cache/apt /var/cache/debconf /var/log/* /etc/apt /etc/dpkg \
        /usr/bin/dpkg* /usr/share/dpkg /usr/lib/dpkg /usr/share/doc /usr/share/man /usr/share/info /usr/share/locale \
    && find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
ENV PATH=/opt/tessera/bin:$PATH \
    PYTHONSAFEPATH=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["tessera"]
CMD ["--help"]
