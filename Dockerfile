# The flatshare gateway, and nothing else: no vLLM, no torch, no simulator dependencies (numpy, scipy,
# matplotlib). `docker build -t flatshare-gateway:0.1.0 .` from the repository root; the Kubernetes
# manifests (deploy/kubernetes) run it. docs/deploy.md has the walk-through.
#
# The base is pinned to an exact Python release on Debian 12; pin its digest too where your registry
# policy asks for it: --build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:...
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# -- build: flatshare as a wheel, without its dependencies (the `cpu` extra and the rest stay out) ----------
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# -- run: the gateway's own dependencies, pinned, and the wheel with --no-deps ---------------------------
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY deploy/docker/gateway-requirements.txt /tmp/gateway-requirements.txt
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir -r /tmp/gateway-requirements.txt \
    && pip install --no-cache-dir --no-deps /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels /tmp/gateway-requirements.txt \
    && groupadd --gid 10001 flatshare \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin flatshare
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["python", "-m", "flatshare.gateway", "gateway"]
CMD ["--config", "/run/flatshare/gateway.toml"]
