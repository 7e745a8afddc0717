# vLLM's own server image with flatshare added, so `--scheduler-cls flatshare.scheduler.MakeRoomScheduler`
# imports (deploy/kubernetes/vllm). flatshare goes in without dependencies: vLLM brings torch and the
# rest, and the scheduler needs nothing else. The vLLM release must be one make-room was tested with
# (docs/real-vllm.md, "Supported vLLM versions").
#   docker build -f deploy/docker/vllm.Dockerfile -t flatshare-vllm:0.1.0 .
# (with this repository's .dockerignore, which lets pyproject.toml, README.md and src/ through)
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}
COPY pyproject.toml README.md /tmp/flatshare/
COPY src /tmp/flatshare/src
RUN python3 -m pip install --no-cache-dir --no-deps /tmp/flatshare && rm -rf /tmp/flatshare
ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]
