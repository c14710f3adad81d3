"""The inspector in a real browser: Playwright driving Debian's Chromium against a real `gym-server serve`
on loopback, over the known store of `inspector_data`.

Each page must show its data (a run's mean reward, a tool call's name, a chart that drew pixels), filters
and the compare page must work, no page may log a console error, and no request may leave loopback.
Screenshots of the main pages go to var/artifacts/ui/ (kept by CI as test artefacts; docs/img/ holds
copies for docs/ui.md).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from authtest import KeyMaker
from conftest import ServerProcess, free_port
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Dialog,
    Page,
    Playwright,
    Request,
    expect,
    sync_playwright,
)
from ui.inspector_data import HOSTILE, HOSTILE_MARKUP, SHOWCASE, populate

ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "artifacts" / "ui"
# Debian's chromium is required, as PostgreSQL is: a missing browser fails the tests, it never skips them.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _serve(url: str, **env: str) -> ServerProcess:
    port = free_port()
    environ = {**os.environ, "GYM_SERVER_NAME": "ui-browser", "GYM_DATABASE_URL": url, **env}
    args = [sys.executable, "-m", "gym_server.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)]
    return ServerProcess(url=f"http://127.0.0.1:{port}", env=environ, args=args)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real `gym-server serve` on loopback over the known store (SQLite), with one live session."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ui-browser') / 'ui.db'}"
    populate(url)
    process = _serve(url)
    process.start()
    try:
        created = httpx.post(f"{process.url}/v1/sessions", json={"env": "counter", "seed": 1}, timeout=10)
        assert created.status_code == 201, created.text
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    # Debian's chromium, never a downloaded one (there is no network for it); root needs --no-sandbox.
    launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    yield launched
    launched.close()


@pytest.fixture
def page(browser: Browser, server: ServerProcess) -> Iterator[Page]:
    """A page that records console errors, uncaught exceptions and every URL it requests, and fails the
    test on any error or on a request that leaves loopback."""
    context = browser.new_context(base_url=server.url, viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    errors: list[str] = []
    requested: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    def on_request(request: Request) -> None:
        requested.append(request.url)

    opened.on("console", on_console)
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.on("request", on_request)
    yield opened
    context.close()
    assert errors == []
    assert requested, "the test requested no page"
    outside = [
        url for url in requested if urlsplit(url).hostname != "127.0.0.1" and not url.startswith("data:")
    ]
    assert outside == []


def _screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _painted(page: Page, chart: str, series: int) -> bool:
    """Whether the chart's canvas holds pixels of series `series`'s colour (axes and grid are grey)."""
    script = """([kind, index]) => {
        const canvas = document.querySelector(`[data-chart=${kind}] canvas`);
        if (!canvas) return false;
        const [r, g, b] = PALETTE[index].match(/[0-9a-f]{2}/g).map((hex) => parseInt(hex, 16));
        const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        for (let i = 0; i < pixels.length; i += 4) {
            if (Math.abs(pixels[i] - r) + Math.abs(pixels[i + 1] - g) + Math.abs(pixels[i + 2] - b) < 12
                && pixels[i + 3] > 200) return true;
        }
        return false;
    }"""
    return bool(page.evaluate(script, [chart, series]))


def test_runs_page_shows_each_run_and_draws_its_curves(page: Page) -> None:
    page.goto("/ui")
    expect(page).to_have_url(re.compile(r"/ui/runs$"))
    baseline = page.locator("tr[data-run=baseline]")
    expect(baseline.locator("td.reward")).to_have_text("0.625")
    expect(baseline).to_contain_text("40.0%")
    expect(page.locator("tr[data-run=improved] td.reward")).to_have_text("0.688")
    expect(page.locator(".meta").first).to_contain_text("3 runs")
    for chart in ("reward", "success", "failures"):
        expect(page.locator(f"[data-chart={chart}] canvas")).to_have_count(1)
        assert _painted(page, chart, 0), f"the {chart} chart drew no series"
    # every charted run drew its points (three runs, three colours)
    assert all(_painted(page, "reward", index) for index in range(3))
    expect(page.locator(".u-legend").first).to_contain_text("baseline")
    _screenshot(page, "runs")


def test_filters_narrow_the_runs(page: Page) -> None:
    page.goto("/ui/runs")
    page.fill("form.filters input[name=policy]", "tiny-b")
    page.click("form.filters button")
    expect(page.locator("tbody tr[data-run]")).to_have_count(1)
    expect(page.locator("tr[data-run=improved]")).to_be_visible()
    expect(page.locator("form.filters input[name=policy]")).to_have_value("tiny-b")
    page.goto("/ui/runs?since=2026-11-15")
    expect(page.locator("tr[data-run=math-run]")).to_have_count(0)
    expect(page.locator("tbody tr[data-run]")).to_have_count(2)
    page.goto("/ui/runs?until=2026-11-20")  # the whole last day counts: baseline ran at 10:00 on it
    expect(page.locator("tbody tr[data-run]")).to_have_count(2)
    expect(page.locator("tr[data-run=improved]")).to_have_count(0)
    page.goto("/ui/runs?env=math")
    expect(page.locator("tbody tr[data-run]")).to_have_count(1)
    expect(page.locator("tr[data-run=math-run]")).to_be_visible()


def test_a_run_leads_to_its_trajectories_and_one_trajectory(page: Page) -> None:
    page.goto("/ui/runs")
    page.click("tr[data-run=baseline] a[href^='/ui/trajectories']")
    expect(page.locator("table.trajectories tbody tr")).to_have_count(5)
    expect(page.locator("table.trajectories")).to_contain_text("sandbox_timeout")
    _screenshot(page, "trajectories")
    page.click(f"a[href='/ui/trajectories/{SHOWCASE}']")
    expect(page.locator("h1")).to_contain_text(SHOWCASE)


def test_trajectory_page_renders_the_conversation_tokens_and_rescores(page: Page) -> None:
    page.goto(f"/ui/trajectories/{SHOWCASE}")
    expect(page.locator(".tool-call .tool-name")).to_have_text("run_python")
    # the code argument highlighted by Pygments: `def` is a keyword span
    expect(page.locator(".code-arg .hl .k", has_text="def")).to_have_count(1)
    expect(page.locator(".role-assistant .hl").last).to_contain_text("print(2 + 3)")
    # the 60-line tool result is folded until opened
    fold = page.locator(".role-tool details.fold")
    expect(fold.locator("summary")).to_contain_text("60 lines")
    expect(page.get_by_text("line 59")).to_be_hidden()
    fold.locator("summary").click()
    expect(page.get_by_text("line 59")).to_be_visible()
    expect(page.locator("dd.reward")).to_have_text("1.000")
    expect(page.locator("table.tokens tbody tr")).to_have_count(2)
    expect(page.locator("table.tokens tbody tr").first).to_contain_text("12")
    expect(page.locator(".lineage")).to_contain_text("g-7")
    expect(page.locator(".lineage")).to_contain_text("tiny-a")
    history = page.locator(".rescore")
    expect(history).to_have_count(2)
    expect(history.first).to_contain_text("1.000 → 0.500")
    expect(history.first.locator(".delta")).to_have_text("(-0.500)")
    expect(history.last).to_contain_text("v1.1 → v2")
    expect(history.last.locator("table.diff")).to_contain_text("+0.500")
    _screenshot(page, "trajectory")


def test_compare_shows_better_and_worse_tasks(page: Page) -> None:
    """Both sides are picked from the store's runs (a select, not free text)."""
    page.goto("/ui/compare")
    options = page.locator("select[name=a] option")
    expect(options).to_have_text(["pick a run", "improved", "baseline", "math-run"])
    expect(page.locator("input[name=a]")).to_have_count(0)
    page.select_option("select[name=a]", "baseline")
    page.select_option("select[name=b]", "improved")
    page.click("form.filters button")
    expect(page.locator("table.better tr")).to_have_count(2)
    expect(page.locator("table.better tr").first).to_contain_text("t2")
    expect(page.locator("table.better")).to_contain_text("+0.250")
    expect(page.locator("table.worse tr")).to_have_count(1)
    expect(page.locator("table.worse")).to_contain_text("t3")
    expect(page.locator(".meta")).to_contain_text("4 tasks in common")
    _screenshot(page, "compare")
    page.goto("/ui/compare?by=policy&a=tiny-a&b=tiny-b&env=tool_call")
    expect(page.locator("table.worse")).to_contain_text("t3")
    expect(page.locator("select[name=a]")).to_have_value("tiny-a")
    page.click("#by-run")  # switching what is compared offers the other names
    expect(page.locator("select[name=b] option")).to_have_text(["pick a run", "improved", "baseline"])


def test_trajectories_sort_by_reward_and_keep_the_order_when_filtering(page: Page) -> None:
    page.goto("/ui/trajectories?run=baseline")
    page.click("#sort-reward-desc")
    rewards = page.locator("table.trajectories tbody tr td:nth-child(7)")
    expect(rewards).to_have_text(["1.000", "1.000", "0.500", "0.000", "–"])
    expect(page.locator("#sort-reward-desc")).to_have_class("active")
    page.click("#sort-reward-asc")
    expect(rewards).to_have_text(["0.000", "0.500", "1.000", "1.000", "–"])
    page.fill("input[name=task_id]", "t1")
    page.click("form.filters button")
    expect(page).to_have_url(re.compile(r"sort=reward-asc"))
    page.click("#sort-newest")
    expect(page).not_to_have_url(re.compile(r"sort="))


def test_live_page_shows_sessions_capacity_sandboxes_and_writer(page: Page) -> None:
    page.goto("/ui/live")
    expect(page.locator("#live-count")).to_have_text("1")
    expect(page.locator("table.live")).to_contain_text("counter")
    expect(page.locator(".big")).to_contain_text("of 10000")
    expect(page.locator("#writer-pending")).to_contain_text("rows waiting")
    _screenshot(page, "live")


def test_bad_input_is_a_problem_not_a_crash(server: ServerProcess) -> None:
    for path, detail in [
        ("/ui/runs?since=yesterday", "since must be a date"),
        ("/ui/trajectories?after=garbage", "cursor"),
        ("/ui/trajectories?status=exploded", "status must be one of"),
    ]:
        response = httpx.get(server.url + path)
        assert response.status_code == 422, path
        assert response.headers["content-type"].startswith("application/problem+json")
        assert detail in response.json()["detail"]
    missing = httpx.get(f"{server.url}/ui/trajectories/absent")
    assert missing.status_code == 404


def test_assets_are_served_from_the_package(server: ServerProcess) -> None:
    for asset in ("uPlot.iife.min.js", "uPlot.min.css", "app.js", "app.css", "LICENSE.uPlot"):
        assert httpx.get(f"{server.url}/ui/static/{asset}").status_code == 200, asset
    timing = httpx.get(f"{server.url}/ui/runs").headers["server-timing"]
    assert timing.startswith("app;dur=")


def test_model_output_is_shown_as_text_and_runs_nothing(page: Page) -> None:
    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.goto(f"/ui/trajectories/{HOSTILE}")
    expect(page.locator(".role-user .text")).to_have_text(HOSTILE_MARKUP)
    expect(page.locator(".tool-call .tool-name")).to_have_text("<i>tool</i>")
    expect(page.locator(".tool-call")).to_contain_text("{not json")  # bad arguments shown as written
    expect(page.locator("main img, main script, main i, main b")).to_have_count(0)
    assert dialogs == []


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """The known store behind a server that requires keys, and a `read` key of the rows' tenant."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ui-login') / 'ui.db'}"
    populate(url)  # rows of the tenant `default`, as stored before keys existed
    key = KeyMaker(url).create("default", "read")
    process = _serve(url, GYM_AUTH__MODE="on")
    process.start()
    try:
        yield process, key
    finally:
        process.stop()


def test_a_browser_logs_in_with_a_key_and_out_again(
    browser: Browser, keyed_server: tuple[ServerProcess, str]
) -> None:
    """The login as a person meets it: sent to the form, a mistyped key refused with a message, the
    right one opens the page first asked for, the cookie is HttpOnly and holds no key, and logging out
    (the form posting its CSRF token) sends every page back to the form."""
    server, key = keyed_server
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    page.goto("/ui/runs")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=%2Fui%2Fruns$"))
    page.fill("#key", key[:-1] + ("y" if key.endswith("x") else "x"))
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    page.fill("#key", key)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/ui/runs$"))
    expect(page.locator("tr[data-run=baseline] td.reward")).to_have_text("0.625")
    (cookie,) = context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and key not in cookie["value"]
    assert key not in page.content()
    page.goto("/ui/logout")
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    page.goto("/ui/runs")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    context.close()
