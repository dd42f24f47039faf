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
COPY requirements/runtime.lock requirements/runtime.lock
RUN /opt/tessera/bin/pip install --no-cache-dir --require-hashes -r requirements/runtime.lock
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
# No setuid or setgid binary (su, passwd, mount, ...): nothing in the image may gain privileges.
RUN find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
COPY --from=build /opt/tessera /opt/tessera
ENV PATH=/opt/tessera/bin:$PATH \
    PYTHONSAFEPATH=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["tessera"]
CMD ["--help"]
