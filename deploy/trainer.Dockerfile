# The GPU trainer of compose.yaml's `gpu` profile: TRL GRPO (examples/train_grpo_trl.py) driving the gym
# over HTTP and sampling from the vllm service. Built on the vLLM image by default, so torch, CUDA and
# transformers match the inference server's; the torch/vllm/triton pins of the base are kept as pip
# constraints so installing the trainer extra cannot swap them for other builds.
#   docker build -f deploy/trainer.Dockerfile -t gym-trainer:latest .
ARG TRAINER_BASE_IMAGE=vllm/vllm-openai:v0.11.0
FROM ${TRAINER_BASE_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore PYTHONUNBUFFERED=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY datasets/ datasets/
COPY environments/ environments/
COPY verifiers/ verifiers/
COPY trainer_adapters/ trainer_adapters/
COPY gym_server/ gym_server/
COPY examples/ examples/
ARG EXTRAS=trl
RUN python3 -m pip freeze | grep -iE '^(torch|torchvision|torchaudio|vllm|triton|xformers|flashinfer[-_a-z0-9]*)==' \
        > /tmp/base-constraints.txt || true; \
    python3 -m pip install -c /tmp/base-constraints.txt ".[${EXTRAS}]" peft
# The vLLM image's entrypoint is `vllm serve`; this one runs whatever command compose gives it.
ENTRYPOINT []
CMD ["python3", "examples/train_grpo_trl.py", "--config", "gpu"]
