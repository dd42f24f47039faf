# tessera: operator, planner CLI and profiler in one image.
# Dependencies come from requirements/runtime.lock (exact versions, hashes); the
# wheel carries the examples and CRDs. The build stage has a C compiler, so the
# twin's kernel is compiled into the package.
FROM python:3.11-slim AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements/runtime.lock ./requirements/
RUN pip install --no-cache-dir --prefix=/install --require-hashes -r requirements/runtime.lock
COPY pyproject.toml setup.py README.md ./
COPY tessera ./tessera
COPY planner ./planner
COPY operator ./operator
COPY profiler-job ./profiler-job
COPY examples ./examples
COPY crds ./crds
RUN pip install --no-cache-dir --prefix=/install --no-deps .

FROM python:3.11-slim
COPY --from=build /install /usr/local
RUN useradd --uid 65532 --no-create-home tessera
USER 65532
WORKDIR /tmp
ENTRYPOINT ["tessera"]
CMD ["--help"]
