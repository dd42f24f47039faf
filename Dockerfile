# tessera: operator, planner CLI and profiler in one image.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY tessera ./tessera
COPY planner ./planner
COPY operator ./operator
COPY profiler-job ./profiler-job
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
COPY examples /opt/tessera/examples
RUN useradd --uid 65532 --no-create-home tessera
USER 65532
WORKDIR /opt/tessera
ENTRYPOINT ["tessera"]
CMD ["--help"]
