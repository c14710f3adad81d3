"""The committed audit (`audit.json`): what the family registers, that it agrees with itself, and that a
sample of its verdicts comes out the same when the audit runs again here."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

pytest.importorskip("reasoning_gym")

from gym_env_reasoning_gym.audit import GeneratorAudit, audit_generator
from gym_env_reasoning_gym.env import (
    AUDIT_FILE,
    audited,
    environments,
    generators,
    make_environment,
    max_level,
)

DOCUMENT = json.loads(AUDIT_FILE.read_text(encoding="utf-8"))
VERDICTS = {name: GeneratorAudit.model_validate(verdict) for name, verdict in DOCUMENT["generators"].items()}
PASSED = sorted(name for name, verdict in VERDICTS.items() if verdict.passed)
# Re-audited here: quick ones whose every accepted level passed (so max_level does not hang on the
# audit's time budget), spread over the alphabet; and failures whose reason does not depend on time.
SAMPLE = [
    name
    for name in PASSED
    if VERDICTS[name].seconds < 5 and VERDICTS[name].max_level == VERDICTS[name].levels_defined - 1
][::25]
FAILED_SAMPLE = ["acre", "game_of_life_halting"]


def test_the_audit_covers_every_generator_of_the_installed_reasoning_gym() -> None:
    factory = pytest.importorskip("reasoning_gym.factory")
    assert DOCUMENT["reasoning_gym"] == importlib.metadata.version("reasoning-gym")
    assert set(VERDICTS) == set(factory.DATASETS)
    assert DOCUMENT["passed"] == len(PASSED) >= 80
    assert DOCUMENT["failed"] == len(VERDICTS) - len(PASSED)


def test_every_verdict_is_complete() -> None:
    for name, verdict in VERDICTS.items():
        if verdict.passed:
            assert verdict.reason is None and verdict.fingerprint, name
            assert 0 <= verdict.max_level < verdict.levels_defined, name
            assert verdict.description, name
        else:
            assert verdict.reason, name


def test_the_family_registers_exactly_the_generators_that_passed() -> None:
    assert generators() == PASSED
    assert [cls.name for cls in environments()] == [f"reasoning_gym/{name}" for name in PASSED]
    assert audited()["acre"]["passed"] is False
    for name in PASSED:
        assert max_level(name) == VERDICTS[name].max_level
    with pytest.raises(ValueError, match="no curriculum"):
        make_environment("acre")  # the refusal quotes the audit's reason


def test_the_sample_is_not_empty() -> None:
    assert len(SAMPLE) >= 3


@pytest.mark.parametrize("generator", SAMPLE + FAILED_SAMPLE)
async def test_a_sample_audits_the_same_again(generator: str) -> None:
    recorded, again = VERDICTS[generator], await audit_generator(generator)
    assert (again.passed, again.reason) == (recorded.passed, recorded.reason)
    assert again.fingerprint == recorded.fingerprint  # the same tasks, so the same questions and answers
    if recorded.passed:
        assert again.max_level == recorded.max_level
        assert again.levels_defined == recorded.levels_defined
