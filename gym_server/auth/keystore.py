"""The `api_keys` table: create, list, revoke and load keys (synchronous; the CLI and the key table call it).

Nothing here returns or logs a secret except `create_key`, whose caller shows the new key once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from gym_server.auth.keys import Scope, new_key, parse_scopes, validate_tenant
from gym_server.store.models import ApiKey
from gym_server.store.records import utcnow
from gym_server.store.storable import name_problem

__all__ = ["KeyInfo", "StoredKey", "create_key", "list_keys", "load_active_keys", "revoke_key"]


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What may be shown about a key: everything but its hash."""

    id: str
    tenant: str
    scopes: frozenset[Scope]
    name: str | None
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class StoredKey:
    """An active key as the in-memory table holds it."""

    tenant: str
    scopes: frozenset[Scope]
    secret_hash: str

    def __repr__(self) -> str:  # never the hash, should one be logged
        return f"StoredKey(tenant={self.tenant!r}, scopes={sorted(self.scopes)!r})"


def _info(row: ApiKey) -> KeyInfo:
    return KeyInfo(row.id, row.tenant, parse_scopes(row.scopes), row.name, row.created_at, row.revoked_at)


def create_key(
    engine: Engine, tenant: str, scopes: list[str], name: str | None = None
) -> tuple[KeyInfo, str]:
    """Store a new key; returns its description and the key itself, which is not stored anywhere.

    Raises:
        ValueError: a bad tenant name or scope, or a name the store cannot keep.
    """
    validate_tenant(tenant)
    if name is not None and (problem := name_problem("the key's name", name)):
        raise ValueError(problem)
    wanted = parse_scopes(scopes)
    key_id, key, secret_hash = new_key()
    row = ApiKey(
        id=key_id,
        tenant=tenant,
        scopes=",".join(sorted(wanted)),
        secret_hash=secret_hash,
        name=name,
        created_at=utcnow(),
        revoked_at=None,
    )
    with Session(engine) as session, session.begin():
        session.add(row)
        session.flush()
        info = _info(row)
    return info, key


def list_keys(engine: Engine) -> list[KeyInfo]:
    """Every key, revoked ones too, oldest first."""
    with Session(engine) as session:
        return [_info(row) for row in session.scalars(select(ApiKey).order_by(ApiKey.created_at, ApiKey.id))]


def revoke_key(engine: Engine, key_id: str) -> bool:
    """Revoke a key (kept, marked revoked); False when no active key has this id."""
    with Session(engine) as session, session.begin():
        statement = (
            update(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=utcnow())
            .returning(ApiKey.id)
        )
        return session.execute(statement).first() is not None


def load_active_keys(engine: Engine) -> dict[str, StoredKey]:
    """Every key not revoked, by id: what the server checks requests against."""
    statement = select(ApiKey.id, ApiKey.tenant, ApiKey.scopes, ApiKey.secret_hash).where(
        ApiKey.revoked_at.is_(None)
    )
    with Session(engine) as session:
        return {
            key_id: StoredKey(tenant, parse_scopes(scopes), secret_hash)
            for key_id, tenant, scopes, secret_hash in session.execute(statement)
        }
