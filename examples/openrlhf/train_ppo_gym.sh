#!/usr/bin/env bash
# GRPO with OpenRLHF 0.11.2 on gym episodes: a GPU host (one node; vLLM, DeepSpeed, Ray), a running gym.
# NOT run in this repository (no GPU here): see docs/openrlhf.md for what is proven on a CPU.
#   pip install 'openrlhf[vllm]==0.11.2' 'gym-server[openrlhf]'
#   GYM_URL=http://127.0.0.1:8000 MODEL=Qwen/Qwen2.5-0.5B-Instruct bash examples/openrlhf/train_ppo_gym.sh
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
ENV=${GYM_ENV:-counter}
OUT=${OUT:-var/openrlhf-$ENV}
GPUS=${GPUS:-1}
export GYM_URL=${GYM_URL:-http://127.0.0.1:8000}
export GYM_RUN=${GYM_RUN:-openrlhf-$ENV}
export GYM_OPENRLHF_MAX_TURNS=${GYM_OPENRLHF_MAX_TURNS:-8}
mkdir -p "$OUT"
python "$(dirname "$0")/make_dataset.py" --gym "$GYM_URL" --env "$ENV" --out "$OUT/prompts.jsonl"
AGENT=$(python -c 'import gym_trainer.openrlhf.agent_func as m; print(m.__file__)')

ray start --head --num-gpus "$GPUS" >/dev/null
trap 'ray stop >/dev/null' EXIT
# The vLLM actors read GYM_* from the job's environment: pass them in the runtime env.
ray job submit --address=http://127.0.0.1:8265 \
  --runtime-env-json="{\"env_vars\": {\"GYM_URL\": \"$GYM_URL\", \"GYM_RUN\": \"$GYM_RUN\", \"GYM_OPENRLHF_MAX_TURNS\": \"$GYM_OPENRLHF_MAX_TURNS\"}}" \
  -- python -m openrlhf.cli.train_ppo_ray \
  --actor.num_nodes 1 --actor.num_gpus_per_node "$GPUS" \
  --vllm.num_engines 1 --vllm.tensor_parallel_size 1 --vllm.gpu_memory_utilization 0.5 \
  --train.colocate_all --vllm.enable_sleep --ds.zero_stage 3 \
  --actor.model_name_or_path "$MODEL" \
  --train.agent_func_path "$AGENT" \
  --data.prompt_dataset "$OUT/prompts.jsonl" --data.input_key prompt --data.label_key label \
  --rollout.batch_size 8 --rollout.n_samples_per_prompt 4 --train.batch_size 32 \
  --rollout.max_new_tokens 512 --data.max_len 4096 \
  --algo.advantage.estimator group_norm \
  --algo.dynamic_filtering_enable --algo.dynamic_filtering_range 0 1.000001 \
  --actor.adam.lr 1e-6 --train.num_episodes 1 \
  --ckpt.path "$OUT/checkpoint"
