"""The native path of `protocols.py`: `POST /v1/sessions`, `POST /v1/sessions/{id}/step`, `DELETE`."""

from __future__ import annotations

from _loadgen import HttpConnection
from _protocol_path import ProtocolPath, UnexpectedAnswer, task_id

__all__ = ["PATHS", "NativeClient"]

_ADD = (
    b'{"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function",'
    b'"function":{"name":"add","arguments":"{\\"amount\\": 1}"}}]}}'
)
_SUBMIT = (
    b'{"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function",'
    b'"function":{"name":"submit","arguments":"{}"}}]}}'
)


class NativeClient:
    """The gym's own API over one keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = HttpConnection(host, port, timeout_s=30.0)
        self._add = self._submit = self._delete = b""

    async def connect(self) -> None:
        await self.conn.connect()

    async def begin(self, index: int) -> None:
        body = f'{{"env":"counter","task_id":"{task_id(index)}","seed":{index}}}'.encode()
        created = await self.conn.send(self.conn.render("POST", "/v1/sessions", body))
        if created.status != 201:
            raise UnexpectedAnswer(f"create: {created.status}")
        path = f"/v1/sessions/{created.json()['session_id']}"
        self._add = self.conn.render("POST", f"{path}/step", _ADD)
        self._submit = self.conn.render("POST", f"{path}/step", _SUBMIT)
        self._delete = self.conn.render("DELETE", path)

    async def step(self, last: bool) -> None:
        answer = await self.conn.send(self._submit if last else self._add)
        if answer.status != 200 or not answer.body.startswith(b'{"messages":[{"role":"tool"'):
            raise UnexpectedAnswer(f"step: {answer.status}")

    async def end(self) -> None:
        deleted = await self.conn.send(self._delete)
        if deleted.status != 204:
            raise UnexpectedAnswer(f"delete: {deleted.status}")

    async def close(self) -> None:
        await self.conn.close()


PATHS = [ProtocolPath("native /v1/sessions", "create, K steps, DELETE over HTTP/1.1", NativeClient)]
