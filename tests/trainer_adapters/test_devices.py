"""`--device`/`--dtype`: the resolver's rules, the refusal of CUDA where there is none, and that the placed
(device-resolved) CPU path samples exactly what the plain one does and what the trainer scores."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gym_trainer.devices import DeviceUnavailable, parse_device, resolve
from gym_trainer.generation import GenerationRequest, generate_batch

torch = pytest.importorskip("torch")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a host without CUDA")


def test_auto_picks_cuda_only_when_it_is_there_and_the_cpu_stays_fp32() -> None:
    auto = resolve()
    assert auto.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    cpu = resolve("cpu", "auto")
    assert (cpu.device, cpu.dtype, cpu.is_cuda, cpu.bf16) == (
        torch.device("cpu"),
        torch.float32,
        False,
        False,
    )
    assert resolve("CPU", "bf16").dtype == torch.bfloat16
    assert resolve("cpu").describe() == "cpu fp32"


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cpu:0", "auto:1", "cuda:-1", "cuda:x"])
def test_malformed_devices_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--device must be"):
        parse_device(text)


def test_an_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="--dtype must be"):
        resolve("cpu", "fp16")


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_cuda_names_what_is_missing(device: str) -> None:
    with pytest.raises(DeviceUnavailable) as caught:
        resolve(device)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"--device {device} needs CUDA")
    assert ("CPU-only build" if torch.version.cuda is None else "sees no usable GPU") in message


def test_an_index_past_the_visible_gpus_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # No GPU here: torch.cuda's answers are stubbed to reach the index rule (the only stub in this file).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(DeviceUnavailable, match="asks for GPU 3, and 1 GPU"):
        resolve("cuda:3")


def _requests(eos: int) -> list[GenerationRequest]:
    settings = [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0), (1.3, 0.5)]
    return [
        GenerationRequest(
            prompt_ids=list(range(40, 43 + k)),
            max_tokens=16,
            temperature=settings[k % 4][0],
            top_p=settings[k % 4][1],
            seed=k,
            stop_token_ids=(eos,),
        )
        for k in range(8)
    ]


def test_the_placed_cpu_path_samples_exactly_the_plain_one(tiny_tokenizer: Any) -> None:
    from gym_trainer.models import build_tiny_model, load_policy

    plain = build_tiny_model(tiny_tokenizer, seed=3)
    placed, _ = load_policy("tiny", seed=3, placement=resolve("cpu", "auto"))
    requests = _requests(tiny_tokenizer.eos_token_id)
    a = generate_batch(plain, requests, tiny_tokenizer.pad_token_id)
    b = generate_batch(placed, requests, tiny_tokenizer.pad_token_id)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.logprobs for o in a] == [o.logprobs for o in b]
    assert [o.finish_reason for o in a] == [o.finish_reason for o in b]


def test_batched_sampling_draws_what_torch_multinomial_draws_and_reports_what_the_trainer_scores(
    tiny_tokenizer: Any,
) -> None:
    """One row, re-run without a cache: full forward, processed logprobs, `torch.multinomial` with the
    row's seed. The batched sampler (KV cache, other rows beside it) gives the same ids and logprobs."""
    from gym_trainer.models import load_policy

    model, _ = load_policy("tiny", seed=3, placement=resolve("cpu"))
    requests = [r for r in _requests(tiny_tokenizer.eos_token_id) if r.top_p == 1.0 and r.temperature > 0]
    outputs = generate_batch(model, requests, tiny_tokenizer.pad_token_id)
    for request, output in zip(requests, outputs, strict=True):
        generator = torch.Generator()
        generator.manual_seed(request.seed)
        ids: list[int] = []
        with torch.no_grad():
            for k in range(len(output.token_ids)):
                logits = model(torch.tensor([request.prompt_ids + ids])).logits[0, -1]
                logprobs = torch.log_softmax(logits / request.temperature, dim=-1)
                token = int(torch.multinomial(logprobs.exp(), 1, generator=generator))
                assert abs(float(logprobs[token]) - output.logprobs[k]) < 1e-5
                ids.append(token)
        assert ids == output.token_ids


def test_bf16_weights_sample_and_report_fp32_logprobs(tiny_tokenizer: Any) -> None:
    from gym_trainer.models import load_policy

    model, _ = load_policy("tiny", placement=resolve("cpu", "bf16"))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    (output,) = generate_batch(model, _requests(tiny_tokenizer.eos_token_id)[:1], tiny_tokenizer.pad_token_id)
    assert 1 <= len(output.token_ids) == len(output.logprobs) <= 16
    assert all(0 <= t < len(tiny_tokenizer) for t in output.token_ids) and all(
        lp <= 0 for lp in output.logprobs
    )


def _invoke(command: Any, *args: str) -> Any:
    app = typer.Typer()
    app.command()(command)
    return CliRunner().invoke(app, list(args))


@no_cuda
def test_demo_and_policy_serve_refuse_cuda_in_one_line_before_starting(tmp_path: Any) -> None:
    pytest.importorskip("trl")
    from gym_server.cli.demo import demo
    from gym_server.cli.policy import serve

    for command, args in (
        (demo, ["--tracker", "none", "--output", str(tmp_path)]),
        (serve, ["--port", "1"]),
    ):
        result = _invoke(command, "--device", "cuda", *args)
        assert result.exit_code == 2, result.output
        (line,) = result.output.strip().splitlines()  # nothing started before it, nothing after
        assert line.startswith("error: --device cuda needs CUDA")
    assert not (tmp_path / "gym.db").exists()  # no gym was started
    bad = _invoke(serve, "--device", "gpu")
    assert bad.exit_code == 2 and "--device must be" in bad.output


async def test_the_local_sampler_reports_the_device_its_model_is_on(tiny_tokenizer: Any) -> None:
    from gym_trainer.models import load_policy
    from gym_trainer.samplers import LocalSampler

    model, _ = load_policy("tiny", placement=resolve("cpu", "bf16"))
    sampler = LocalSampler(model, tiny_tokenizer.pad_token_id)
    assert sampler.describe()["device"] == "cpu torch.bfloat16"
    await sampler.aclose()


@no_cuda
def test_scripts_get_the_refusal_as_one_stderr_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    from gym_trainer.devices import resolve_or_exit

    assert resolve_or_exit("cpu", "fp32").device.type == "cpu"
    for device, text in (("cuda", "needs CUDA"), ("tpu", "--device must be")):
        with pytest.raises(SystemExit) as caught:
            resolve_or_exit(device, "auto")
        assert caught.value.code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("error: ") and text in line
