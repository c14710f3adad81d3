"""Running totals per tenant, env, run, policy model and task, kept by triggers on `trajectories`.

Comparing two policies grouped half of a million-row store by task on every request (0.35 to 1.25 s);
these totals let it read a few thousand rows instead. Triggers keep them, not the writer's Python: every
path that changes a trajectory (the writer's upserts, a re-score, `mark_lost`, a delete, a hand-written
UPDATE) then moves the totals in its own statement's transaction, with nothing read back first. An
update moves them only when what they count changes (reward, failure, or the key), so the snapshots of
a live episode, which change neither, cost the writer nothing here; a new score under the same key (a
close, a re-score) is one UPDATE of that key's totals by the difference. The upgrade backfills the
totals of the rows already stored.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY = ["policy_model", "task_id", "env", "run", "tenant"]
_COUNTS = ["episodes", "rewarded", "reward_sum", "successes", "failures"]

# The policy's model as `store.models.PolicyModel` spells it, of a row named by `{row}`.
_POLICY_MODEL = {
    "sqlite": "json_extract({row}.policy, '$.model')",
    "postgresql": "({row}.policy ->> 'model')",
}

# What one trajectory adds to its key's totals, `{sign}` 1 to add it and -1 to take it away; success is the
# inspector's (`store.inspector.SUCCESS_REWARD`): full marks without a failure class.
_CONTRIBUTION = [
    "coalesce({policy_model}, '')",
    "{row}.task_id",
    "{row}.env",
    "coalesce({row}.run, '')",
    "{row}.tenant",
    "{sign}",
    "CASE WHEN {row}.reward IS NOT NULL THEN {sign} ELSE 0 END",
    "{sign} * coalesce({row}.reward, 0.0)",
    "CASE WHEN {row}.reward >= 1.0 AND {row}.failure IS NULL THEN {sign} ELSE 0 END",
    "CASE WHEN {row}.failure IS NOT NULL THEN {sign} ELSE 0 END",
]


def _move(dialect: str, row: str, sign: int) -> str:
    """The upsert adding (`sign` 1) or taking away (-1) trajectory `row` (NEW or OLD) to its key's totals."""
    policy_model = _POLICY_MODEL[dialect].format(row=row)
    values = ", ".join(part.format(row=row, sign=sign, policy_model=policy_model) for part in _CONTRIBUTION)
    moved = ", ".join(f"{name} = trajectory_totals.{name} + excluded.{name}" for name in _COUNTS)
    return (
        f"INSERT INTO trajectory_totals ({', '.join(_KEY + _COUNTS)}) VALUES ({values}) "
        f"ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET {moved};"
    )


def _shift(dialect: str) -> str:
    """The one UPDATE for a row whose key stayed: its key's totals move by the difference of its score."""
    parts = {
        row: [
            part.format(row=row, sign=1, policy_model=_POLICY_MODEL[dialect].format(row=row))
            for part in _CONTRIBUTION
        ]
        for row in ("OLD", "NEW")
    }
    counted = zip(_COUNTS, parts["NEW"][len(_KEY) :], parts["OLD"][len(_KEY) :], strict=True)
    shifted = ", ".join(
        f"{name} = {name} + ({new}) - ({old})" for name, new, old in counted if name != "episodes"
    )
    key = " AND ".join(
        f"{name} = {value}" for name, value in zip(_KEY, parts["NEW"][: len(_KEY)], strict=True)
    )
    return f"UPDATE trajectory_totals SET {shifted} WHERE {key};"


def _changed(dialect: str, names: Sequence[str], *, policy_model: bool) -> str:
    """True when an update changes one of the columns `names` (or the policy's model)."""
    differ = "IS NOT" if dialect == "sqlite" else "IS DISTINCT FROM"
    changes = [f"OLD.{name} {differ} NEW.{name}" for name in names]
    if policy_model:
        expression = _POLICY_MODEL[dialect]
        changes.append(f"{expression.format(row='OLD')} {differ} {expression.format(row='NEW')}")
    return "(" + " OR ".join(changes) + ")"


# What a row's key is made of, and what it counts beside it: an update moves the totals only when one
# of them changes; a new score alone shifts its key's totals in place.
_KEY_COLUMNS = ("run", "env", "task_id", "tenant")
_SCORE_COLUMNS = ("reward", "failure")


def _key_changed(dialect: str) -> str:
    return _changed(dialect, _KEY_COLUMNS, policy_model=True)


def _score_changed(dialect: str) -> str:
    return _changed(dialect, _SCORE_COLUMNS, policy_model=False)


def _backfill(dialect: str) -> str:
    contribution = [
        part.format(
            row="trajectories", sign=1, policy_model=_POLICY_MODEL[dialect].format(row="trajectories")
        )
        for part in _CONTRIBUTION
    ]
    keys, counts = contribution[: len(_KEY)], contribution[len(_KEY) :]
    return (
        f"INSERT INTO trajectory_totals ({', '.join(_KEY + _COUNTS)}) "
        f"SELECT {', '.join(keys)}, {', '.join(f'sum({count})' for count in counts)} "
        f"FROM trajectories GROUP BY {', '.join(keys)}"
    )


def _sqlite_triggers() -> list[str]:
    on = "ON trajectories"
    add, take_away = _move("sqlite", "NEW", 1), _move("sqlite", "OLD", -1)
    key_changed = _key_changed("sqlite")
    return [
        f"CREATE TRIGGER trajectory_totals_insert AFTER INSERT {on} BEGIN {add} END",
        f"CREATE TRIGGER trajectory_totals_delete AFTER DELETE {on} BEGIN {take_away} END",
        f"CREATE TRIGGER trajectory_totals_rescore AFTER UPDATE {on} "
        f"WHEN NOT {key_changed} AND {_score_changed('sqlite')} BEGIN {_shift('sqlite')} END",
        f"CREATE TRIGGER trajectory_totals_rekey AFTER UPDATE {on} WHEN {key_changed} "
        f"BEGIN {take_away} {add} END",
    ]


def _postgres_triggers() -> list[str]:
    return [
        f"""CREATE FUNCTION trajectory_totals_move() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'UPDATE' AND NOT {_key_changed("postgresql")} THEN
                {_shift("postgresql")}
                RETURN NULL;
            END IF;
            IF TG_OP IN ('UPDATE', 'DELETE') THEN {_move("postgresql", "OLD", -1)} END IF;
            IF TG_OP IN ('INSERT', 'UPDATE') THEN {_move("postgresql", "NEW", 1)} END IF;
            RETURN NULL;
        END $$""",
        # TRUNCATE fires no row trigger: empty the totals with the table.
        """CREATE FUNCTION trajectory_totals_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            TRUNCATE trajectory_totals;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER trajectory_totals_insert_delete AFTER INSERT OR DELETE ON trajectories "
        "FOR EACH ROW EXECUTE FUNCTION trajectory_totals_move()",
        "CREATE TRIGGER trajectory_totals_update AFTER UPDATE ON trajectories FOR EACH ROW "
        f"WHEN ({_key_changed('postgresql')} OR {_score_changed('postgresql')}) "
        "EXECUTE FUNCTION trajectory_totals_move()",
        "CREATE TRIGGER trajectory_totals_truncate AFTER TRUNCATE ON trajectories "
        "FOR EACH STATEMENT EXECUTE FUNCTION trajectory_totals_truncate()",
    ]


def upgrade() -> None:
    op.create_table(
        "trajectory_totals",
        *(sa.Column(name, sa.String(64 if name == "tenant" else 255), primary_key=True) for name in _KEY),
        *(
            sa.Column(name, sa.Float() if name == "reward_sum" else sa.BigInteger(), nullable=False)
            for name in _COUNTS
        ),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_trajectory_totals_run", "trajectory_totals", ["run", "task_id"])
    dialect = op.get_bind().dialect.name
    op.execute(_backfill(dialect))
    for statement in _sqlite_triggers() if dialect == "sqlite" else _postgres_triggers():
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in ("insert", "delete", "rescore", "rekey"):
            op.execute(f"DROP TRIGGER trajectory_totals_{name}")
    else:
        for name in ("insert_delete", "update", "truncate"):
            op.execute(f"DROP TRIGGER trajectory_totals_{name} ON trajectories")
        op.execute("DROP FUNCTION trajectory_totals_move()")
        op.execute("DROP FUNCTION trajectory_totals_truncate()")
    op.drop_index("ix_trajectory_totals_run", table_name="trajectory_totals")
    op.drop_table("trajectory_totals")
