# dws-operator: multi-stage build. The first stage builds the wheel; the final stage
# installs only that wheel and its dependencies (no compilers, no pip cache) and runs as
# a non-root user. Build with: docker build -t dws-operator:0.1.0 .

FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
RUN pip install --no-cache-dir "build==1.3.0"
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m build --wheel --outdir /wheels

FROM python:3.11.14-slim-bookworm
LABEL org.opencontainers.image.title="dws-operator" \
      org.opencontainers.image.description="Kubernetes operator for ML training on GKE's Dynamic Workload Scheduler" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl \
    && rm -rf /wheels \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin dws
USER 10001:10001
# kopf's liveness endpoint (the Helm chart's probes use it).
EXPOSE 8080
ENTRYPOINT ["dws-operator", "run"]
CMD ["--liveness", "http://0.0.0.0:8080/healthz"]
