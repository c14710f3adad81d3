# The GPU trainer of compose.yaml's `gpu` profile: TRL GRPO (examples/train_grpo_trl.py) driving the gym
# over HTTP and sampling from the vllm service. Built on the vLLM image by default, so torch, CUDA and
# transformers match the inference server's, and the trainer has the vLLM that TRL's weight transfer
# runs on its side (TRL 1.16: vLLM 0.22.0 to 0.31.0). The torch/vllm/triton pins of the base are kept as pip
# constraints so installing the trainer extra cannot swap them for other builds; the extra's own torch pin
# (the CPU wheel this project's machines carry) is left out, the base's CUDA torch stays.
#   docker build -f deploy/trainer.Dockerfile -t gym-trainer:latest .
ARG TRAINER_BASE_IMAGE=vllm/vllm-openai:v0.31.0
FROM ${TRAINER_BASE_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore PYTHONUNBUFFERED=1
WORKDIR /src
# The trainer side alone (trainer_adapters/, gym-trainer): it never imports the service, so none of the
# service's dependencies come in (docs/trainers.md, "Installing the trainer side alone").
COPY trainer_adapters/ trainer_adapters/
COPY examples/ examples/
ARG EXTRAS=trl
RUN python3 -m pip freeze | grep -iE '^(torch|torchvision|torchaudio|vllm|triton|xformers|flashinfer[-_a-z0-9]*)==' \
        > /tmp/base-constraints.txt || true; \
    python3 -c "import sys, tomllib; extras = tomllib.load(open('trainer_adapters/pyproject.toml', 'rb'))['project']['optional-dependencies']; \
print('\n'.join(r for e in sys.argv[1].split(',') for r in extras[e] if not r.startswith('torch')))" "${EXTRAS}" \
        > /tmp/extras.txt; \
    python3 -m pip install -c /tmp/base-constraints.txt ./trainer_adapters -r /tmp/extras.txt
# The vLLM image's entrypoint is `vllm serve`; this one runs whatever command compose gives it.
ENTRYPOINT []
CMD ["python3", "examples/train_grpo_trl.py", "--config", "gpu"]
