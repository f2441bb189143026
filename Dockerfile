# dws-operator: multi-stage build. The first stage builds the wheel; the final stage
# installs the operator's dependencies from requirements.lock (the tested versions, every
# file checked against its sha256; written by hack/lock.sh), then the wheel alone, and runs
# as a non-root user, with no compilers and no pip cache.
# Build with: docker build -t dws-operator:0.1.0 .
#
# BASE is the tag for local builds. Release builds pin it by digest, so that a rebuild of
# the tag upstream cannot change the image:
#   docker build --build-arg BASE=python:3.11.14-slim-bookworm@sha256:<digest> ...
# with the digest of the tag's multi-architecture index, read when the release is cut:
#   crane digest docker.io/library/python:3.11.14-slim-bookworm
# (or skopeo inspect --format '{{.Digest}}' docker://docker.io/library/python:3.11.14-slim-bookworm).
ARG BASE=python:3.11.14-slim-bookworm

FROM ${BASE} AS build
WORKDIR /src
RUN pip install --no-cache-dir "build==1.3.0"
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m build --wheel --outdir /wheels

FROM ${BASE}
LABEL org.opencontainers.image.title="dws-operator" \
      org.opencontainers.image.description="Kubernetes operator for ML training on GKE's Dynamic Workload Scheduler" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The dependencies first, in their own layer: rebuilt only when the lock changes, not when
# the operator's code does. --no-deps: the lock is the whole closure, nothing is resolved.
COPY requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir --require-hashes --no-deps --only-binary :all: \
        -r /tmp/requirements.lock \
    && rm /tmp/requirements.lock \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin dws
# The wheel without its dependencies (they are installed above); pip check fails the build
# if the lock lacks one the wheel requires or pins one outside its bounds.
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-deps --no-index /wheels/*.whl \
    && pip check \
    && rm -rf /wheels
USER 10001:10001
# kopf's liveness endpoint (the Helm chart's probes use it).
EXPOSE 8080
ENTRYPOINT ["dws-operator", "run"]
CMD ["--liveness", "http://0.0.0.0:8080/healthz"]
