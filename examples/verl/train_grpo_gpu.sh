#!/usr/bin/env bash
# GRPO with verl 0.9.1 on gym episodes: verl's trainer (FSDP actor, vLLM rollout, Ray), every sample
# played by GymAgentLoop against a running gym. Needs a GPU host with verl installed per its own pins
# (docs/verl.md); NOT run in this project's CI (no GPU): the parts that run on a CPU are tested in
# tests/interop/verl. Usage: GYM_URL=http://127.0.0.1:8000 MODEL=Qwen/Qwen2.5-0.5B-Instruct bash examples/verl/train_grpo_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
GYM_URL=${GYM_URL:-http://127.0.0.1:8000}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
ENV_NAME=${ENV_NAME:-counter}
OUT=${OUT:-var/verl}
export GYM_URL
python examples/verl/make_dataset.py --gym "$GYM_URL" --env "$ENV_NAME" --out "$OUT"
python -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$OUT/train.parquet" \
    data.val_files="$OUT/val.parquet" \
    data.train_batch_size=32 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.calculate_log_probs=True \
    actor_rollout_ref.rollout.prompt_length=1024 \
    actor_rollout_ref.rollout.response_length=1024 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.agent.agent_loop_config_path=examples/verl/agent_loop.yaml \
    reward.custom_reward_function.path=pkg://gym_trainer.verl.reward \
    reward.custom_reward_function.name=compute_score \
    reward.custom_reward_function.reward_kwargs.gym_url="$GYM_URL" \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.total_training_steps=30 \
    trainer.logger='[console]' \
    trainer.project_name=gym-server \
    trainer.experiment_name="verl-$ENV_NAME" \
    "$@"
