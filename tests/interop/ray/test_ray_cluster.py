"""`gym-server serve --ray` on a real three-node Ray cluster (loopback), one PostgreSQL, one entry point.

Proves: sessions created through the one URL land on several replicas and stay on theirs; a create
names its replica's own URL, which steps the session without the entry point; the replicas
scale up and down with live sessions; a replica process killed, and a whole node killed, mid-episode
leave their sessions stored `lost` (acknowledged closes intact), their clients 410 `session-lost` with a
pointer to the stored trajectory (a client stepping the dead replica directly cannot connect, and
falls back to the entry point), new sessions on the living replicas, the replica replaced, and the dead
replica's bubblewrap sandbox gone with it; and no process of the cluster or its replicas outlives the
run. A second entry point on the same cluster (`sandbox_stack`: `--sandbox-backend ray`, a node offering
`sandbox` slots and no replica slot, its store behind a proxy the test cuts) proves that sandboxes run on
the sandbox node and score, that a killed replica's sandboxes there are released, that a killed sandbox
node fails the episode with `sandbox_error` and leaves nothing running, and that a dead PostgreSQL
answers 503 with `Retry-After` through the entry point and loses nothing acknowledged. The tests run in
order on one cluster.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.error
from typing import Any

import pytest
from client import get, request, tool_call
from conftest import SandboxStack, Stack, descendants, marked_processes, replicas, replicas_at, wait_for

RECOVERY_WAIT_S = 120.0
HUMANEVAL_TASK = "humaneval-000"  # has_close_elements
HUMANEVAL_SOLUTION = (
    "```python\ndef has_close_elements(numbers, threshold):\n"
    "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n```"
)


def create(
    stack: Stack | SandboxStack, env: str = "counter", task_id: str = "counter-0001"
) -> tuple[str, str]:
    """A new session through the entry point: its id and the replica that holds it."""
    status, headers, body = request(stack.url, "POST", "/v1/sessions", {"env": env, "task_id": task_id})
    assert status == 201, body
    return body["session_id"], headers["x-gym-replica"]


def step(stack: Stack | SandboxStack, session_id: str) -> tuple[int, dict[str, str], Any]:
    return request(stack.url, "POST", f"/v1/sessions/{session_id}/step", tool_call("add", {"amount": 1}))


def close(stack: Stack | SandboxStack, session_id: str) -> None:
    status, _, body = request(stack.url, "DELETE", f"/v1/sessions/{session_id}")
    assert status == 204, body


def stored(stack: Stack | SandboxStack, session_id: str, status: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def has_status() -> bool:
        code, body = get(stack.url, f"/v1/rollouts/{session_id}")
        found.update(body or {})
        return code == 200 and body["status"] == status

    wait_for(has_status, 30, f"{session_id} stored {status}")
    return found


def session_on(stack: Stack, name: str | None = None) -> tuple[str, str]:
    """A new session, on replica `name` when given (others created on the way are closed)."""
    for _ in range(20):
        session_id, replica = create(stack)
        if name is None or replica == name:
            return session_id, replica
        close(stack, session_id)
    raise AssertionError(f"no session landed on {name}")


def test_sessions_spread_by_load_and_stay_on_their_replica(stack: Stack) -> None:
    sessions = [create(stack) for _ in range(4)]
    holders = {replica for _, replica in sessions}
    assert len(holders) == 2, sessions  # least loaded first: two each, not all on one
    for session_id, replica in sessions:
        for _ in range(2):
            status, headers, body = step(stack, session_id)
            assert status == 200, body
            assert headers["x-gym-replica"] == replica
        close(stack, session_id)
        record = stored(stack, session_id, "abandoned")
        assert record["server_name"] == replica
    nodes = {entry["node_id"] for entry in replicas(stack)["replicas"]}
    assert len(nodes) == 2  # spread over the two worker nodes


def test_a_create_names_its_replica_so_steps_skip_the_entry_point(stack: Stack) -> None:
    """`direct_sessions` (the default): the 201 carries the replica's own URL; steps sent there reach the
    same session (the router is not on the path), the close through the entry point ends it, and the
    entry point still forwards a client that ignores the URL."""
    status, headers, body = request(
        stack.url, "POST", "/v1/sessions", {"env": "counter", "task_id": "counter-0001"}
    )
    assert status == 201, body
    session_id, holder = body["session_id"], headers["x-gym-replica"]
    address = {entry["name"]: entry["address"] for entry in replicas(stack)["replicas"]}[holder]
    direct = headers["x-gym-replica-url"]
    assert direct == f"http://{address}"
    path = f"/v1/sessions/{session_id}/step"
    answer = request(direct, "POST", path, tool_call("add", {"amount": 1}))
    assert answer[0] == 200, answer
    assert "x-gym-replica" not in answer[1]  # answered by the replica itself, not forwarded
    forwarded = step(stack, session_id)
    assert forwarded[0] == 200 and forwarded[1]["x-gym-replica"] == holder, forwarded
    assert get(direct, f"/v1/sessions/{session_id}")[1]["turns"] == 2
    close(stack, session_id)
    assert stored(stack, session_id, "abandoned")["server_name"] == holder


def test_replicas_scale_up_with_live_sessions_and_back_down(stack: Stack) -> None:
    sessions = [create(stack)[0] for _ in range(6)]  # 6 live > 2 per replica x 2 replicas
    wait_for(lambda: len(replicas(stack)["replicas"]) == 3, RECOVERY_WAIT_S, "a third replica")
    for session_id in sessions:
        close(stack, session_id)
    wait_for(lambda: len(replicas(stack)["replicas"]) == 2, RECOVERY_WAIT_S, "back to two replicas")


def _assert_lost_and_replaced(stack: Stack, victim: str, live_id: str, closed_id: str) -> None:
    answers: list[tuple[int, Any]] = []

    def gone() -> bool:
        status, headers, body = step(stack, live_id)
        answers.append((status, body))
        if status == 503:  # not yet known dead: the client is told when to retry
            assert headers["retry-after"] == "1"
        return status == 410

    wait_for(gone, RECOVERY_WAIT_S, f"410 for {live_id} after {victim} died")
    _, body = answers[-1]
    assert body["type"] == "urn:gym-server:problem:session-lost", body
    assert body["rollout"] == f"/v1/rollouts/{live_id}"
    assert victim in body["detail"]
    lost = stored(stack, live_id, "lost")
    assert lost["server_name"] == victim
    status, state = get(stack.url, f"/v1/sessions/{live_id}")  # reading it back still works
    assert status == 200 and state["status"] == "lost", state
    assert stored(stack, closed_id, "abandoned")["server_name"] == victim  # acknowledged: intact
    new_id, holder = create(stack)
    assert holder != victim
    close(stack, new_id)
    wait_for(
        lambda: len(replicas(stack)["replicas"]) == 2 and victim in replicas(stack)["dead"],
        RECOVERY_WAIT_S,
        f"{victim} replaced",
    )


def test_a_killed_replica_process_loses_only_its_live_sessions(stack: Stack) -> None:
    victim = replicas(stack)["replicas"][0]
    closed_id, _ = session_on(stack, victim["name"])
    step(stack, closed_id)
    close(stack, closed_id)
    live_id, _ = session_on(stack, victim["name"])
    assert step(stack, live_id)[0] == 200
    sandboxed_id = _sandboxed_session_on(stack, victim["name"])
    sandboxes = descendants(victim["pid"])
    assert sandboxes, "the python_repl session's sandbox runs under the replica"
    os.kill(victim["pid"], signal.SIGKILL)
    _assert_lost_and_replaced(stack, victim["name"], live_id, closed_id)
    with pytest.raises(urllib.error.URLError):  # a client stepping it directly falls back to the entry
        request(f"http://{victim['address']}", "POST", f"/v1/sessions/{live_id}/step", {})
    assert stored(stack, sandboxed_id, "lost")["server_name"] == victim["name"]
    wait_for(lambda: not any(_alive(pid) for pid in sandboxes), 30, "the dead replica's sandboxes gone")


def _sandboxed_session_on(stack: Stack, name: str) -> str:
    """A python_repl session on replica `name` whose interpreter (a bubblewrap sandbox) is running."""
    for _ in range(20):
        status, headers, body = request(
            stack.url, "POST", "/v1/sessions", {"env": "python_repl", "task_id": "python_repl-0001"}
        )
        assert status == 201, body
        session_id = body["session_id"]
        if headers["x-gym-replica"] == name:
            ran = request(
                stack.url,
                "POST",
                f"/v1/sessions/{session_id}/step",
                tool_call("run_python", {"code": "print(6*7)"}),
            )
            assert ran[0] == 200 and "42" in str(ran[2]["messages"]), ran
            return str(session_id)
        close(stack, session_id)
    raise AssertionError(f"no python_repl session landed on {name}")


def test_a_killed_node_loses_its_replicas_sessions_and_is_survived(stack: Stack) -> None:
    victim = replicas(stack)["replicas"][0]
    closed_id, _ = session_on(stack, victim["name"])
    close(stack, closed_id)
    live_id, _ = session_on(stack, victim["name"])
    assert step(stack, live_id)[0] == 200
    stack.cluster.add_node()  # room for the replacement once the victim's node is gone
    stack.cluster.kill_node(victim["node_id"])
    _assert_lost_and_replaced(stack, victim["name"], live_id, closed_id)
    time.sleep(1)
    assert not _alive(victim["pid"])  # the node's replica went with it


def run_python(stack: SandboxStack, session_id: str, code: str) -> str:
    status, _, body = request(
        stack.url, "POST", f"/v1/sessions/{session_id}/step", tool_call("run_python", {"code": code})
    )
    assert status == 200, body
    return str(body["messages"][0]["content"])


def sandbox_host(stack: SandboxStack) -> dict[str, Any]:
    hosts = replicas_at(stack.url)["sandbox_hosts"]
    assert len(hosts) == 1, hosts
    return dict(hosts[0])


def leased_by(stack: SandboxStack, owner: str) -> dict[str, Any]:
    """The host once the entry point's view (read every check) shows `owner` holding a lease."""
    wait_for(lambda: owner in sandbox_host(stack)["owners"], 30, f"a lease of {owner} shown")
    return sandbox_host(stack)


def submit_humaneval(stack: SandboxStack) -> tuple[str, dict[str, Any]]:
    """A humaneval episode with a correct solution; its verification runs in a sandbox."""
    session_id, _ = create(stack, "humaneval", HUMANEVAL_TASK)
    message = {"message": {"role": "assistant", "content": HUMANEVAL_SOLUTION}}
    status, _, body = request(stack.url, "POST", f"/v1/sessions/{session_id}/step", message)
    assert status == 200 and body["done"], body
    close(stack, session_id)
    return session_id, body


def test_a_dead_store_answers_503_through_the_entry_point_and_loses_nothing(
    sandbox_stack: SandboxStack,
) -> None:
    """The store's PostgreSQL cut off (a proxy in front of it): creates and closes answer 503
    `store-unavailable` with `Retry-After`; once it is back, the close repeated is confirmed and every
    acknowledged trajectory is stored."""
    closed_id, _ = create(sandbox_stack)
    assert step(sandbox_stack, closed_id)[0] == 200
    close(sandbox_stack, closed_id)
    live_id, _ = create(sandbox_stack)
    assert step(sandbox_stack, live_id)[0] == 200
    sandbox_stack.store_proxy.cut()
    try:
        refused = [
            request(sandbox_stack.url, "POST", "/v1/sessions", {"env": "counter", "task_id": "counter-0001"}),
            request(sandbox_stack.url, "DELETE", f"/v1/sessions/{live_id}"),
        ]
    finally:
        sandbox_stack.store_proxy.restore()
    for status, headers, body in refused:
        assert status == 503, body
        assert headers["retry-after"] == "5"
        assert headers["content-type"] == "application/problem+json"
        assert body["type"] == "urn:gym-server:problem:store-unavailable", body
    status, _, body = request(sandbox_stack.url, "DELETE", f"/v1/sessions/{live_id}")  # the retry confirms
    assert status == 204, body
    assert stored(sandbox_stack, closed_id, "abandoned")["num_turns"] == 1
    assert stored(sandbox_stack, live_id, "abandoned")["num_turns"] == 1


def test_sandboxes_run_on_the_sandbox_node(sandbox_stack: SandboxStack) -> None:
    """The replica's node offers no `sandbox` slot: its code runs under the host on the sandbox node."""
    state = replicas_at(sandbox_stack.url)
    host = sandbox_host(sandbox_stack)
    assert host["node_id"] == sandbox_stack.sandbox_node and host["backend"] == "bubblewrap"
    [replica] = state["replicas"]
    assert replica["node_id"] != sandbox_stack.sandbox_node
    session_id, body = submit_humaneval(sandbox_stack)
    assert body["reward"] == 1.0, body
    assert stored(sandbox_stack, session_id, "completed")["reward"] == 1.0
    repl_id, _ = create(sandbox_stack, "python_repl", "python_repl-0001")
    assert "42" in run_python(sandbox_stack, repl_id, "print(6 * 7)")
    leased_by(sandbox_stack, replica["name"])
    assert descendants(host["pid"]), "the interpreter runs under the sandbox host"
    assert not descendants(replica["pid"]), "nothing runs under the replica"
    close(sandbox_stack, repl_id)


def test_a_killed_replica_releases_its_sandboxes_on_the_sandbox_node(sandbox_stack: SandboxStack) -> None:
    [replica] = replicas_at(sandbox_stack.url)["replicas"]
    repl_id, _ = create(sandbox_stack, "python_repl", "python_repl-0001")
    assert "42" in run_python(sandbox_stack, repl_id, "print(6 * 7)")
    host = leased_by(sandbox_stack, replica["name"])
    running = descendants(host["pid"])
    assert running
    os.kill(replica["pid"], signal.SIGKILL)
    wait_for(
        lambda: replica["name"] not in sandbox_host(sandbox_stack)["owners"],
        RECOVERY_WAIT_S,
        f"{replica['name']}'s sandboxes released",
    )
    wait_for(lambda: not any(_alive(pid) for pid in running), 30, "its interpreter gone")
    assert stored(sandbox_stack, repl_id, "lost")["server_name"] == replica["name"]
    wait_for(
        lambda: any(entry["name"] != replica["name"] for entry in replicas_at(sandbox_stack.url)["replicas"]),
        RECOVERY_WAIT_S,
        "a replacement replica",
    )


def test_a_killed_sandbox_node_fails_the_episode_with_sandbox_error(sandbox_stack: SandboxStack) -> None:
    """Mid-episode: the interpreter's next cell says the sandbox is gone, verification stores
    `sandbox_error` (not a hang, not a 500), and nothing of the node's sandboxes is left running."""
    repl_id, _ = create(sandbox_stack, "python_repl", "python_repl-0001")
    assert "42" in run_python(sandbox_stack, repl_id, "print(6 * 7)")
    host = sandbox_host(sandbox_stack)
    running = descendants(host["pid"]) | {host["pid"]}
    sandbox_stack.stack.cluster.kill_node(sandbox_stack.sandbox_node)
    wait_for(lambda: not _alive(host["pid"]), 30, "the sandbox host gone with its node")
    answer = run_python(sandbox_stack, repl_id, "print(1)")
    assert "the Python sandbox is unavailable" in answer and "gone" in answer, answer
    session_id, body = submit_humaneval(sandbox_stack)
    assert body["reward"] == 0.0, body
    row = stored(sandbox_stack, session_id, "completed")
    assert row["failure"] == "sandbox_error", row
    close(sandbox_stack, repl_id)
    wait_for(lambda: not any(_alive(pid) for pid in running), 30, "the node's sandboxes gone")
    wait_for(lambda: not replicas_at(sandbox_stack.url)["sandbox_hosts"], 30, "the host forgotten")


def test_the_sandbox_entry_point_stops_cleanly(sandbox_stack: SandboxStack) -> None:
    sandbox_stack.gym.send_signal(signal.SIGTERM)
    assert sandbox_stack.gym.wait(90) == 0


def test_nothing_outlives_the_run(stack: Stack) -> None:
    """Last: stop the entry point and the cluster, then no marked process may remain."""
    stack.gym.send_signal(signal.SIGTERM)
    assert stack.gym.wait(90) == 0
    stack.cluster.shutdown()
    wait_for(lambda: not marked_processes(stack.marker), 60, "no process of the run left")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
