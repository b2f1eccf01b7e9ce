"""The operator console in a real headless browser (chromium + chromedriver via selenium),
against a real gateway on 127.0.0.1 with real upstream processes.

One scenario, as an operator would live it: log in with the token; see the current revision;
a hold keeps that revision open while a watched file changes; without a reload the page shows
the new revision (published because a watched file changed) and the old one draining its pin
with the hold's owner; releasing the hold closes it; the refresh action answers with the cycle
and the failed source's reason; the failed source's reason shows in Sources. Throughout: no
console errors (CSP violations included), and the token never appears in a URL the browser
requested, in its location, or in the page. A screenshot goes to ``build/console.png`` (and to
``docs/console.png`` with ``UPDATE_CONSOLE_SCREENSHOT=1``).

Selenium blocks, the gateway runs on this test's event loop: every browser step runs in a
worker thread (``anyio.to_thread``), every wait in the browser is bounded (WebDriverWait)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from mcp_reconciler.reconciler.authority import GrantPolicy
from tests.api.conftest import OPERATOR_TOKEN, backdate, served_gateway, write_config
from tests.integration.conftest import REPO_ROOT, SERVER_MODULE
from tests.support.waits import until

pytestmark = pytest.mark.anyio

WAIT_S = 20.0
T = TypeVar("T")


@contextmanager
def chromium(binaries: tuple[str, str]) -> Iterator[WebDriver]:
    binary, driver_path = binaries
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1250",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    # browser: the console (errors, CSP violations); performance: DevTools network events, so
    # every URL the browser requested is seen, the never-ending event stream included.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        driver.set_page_load_timeout(WAIT_S)
        yield driver
    finally:
        driver.quit()


async def step(fn: Callable[[], T]) -> T:
    """Run one blocking browser step off the event loop (the gateway keeps serving)."""
    return await anyio.to_thread.run_sync(fn)


def wait_for(driver: WebDriver, what: str, predicate: Callable[[WebDriver], Any]) -> Any:
    try:
        return WebDriverWait(
            driver, WAIT_S, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
        ).until(predicate)
    except Exception as exc:
        raise AssertionError(f"the page never showed {what}:\n{driver.find_element(By.TAG_NAME, 'body').text}") from exc


def text_of(driver: WebDriver, css: str) -> str:
    """The visible text of every element matching ``css``, read in one script call: the page
    re-renders every second, so element handles would go stale between finding and reading."""
    script = "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.innerText).join(' ')"
    return str(driver.execute_script(script, css))


def tools_source(tools_file: Path) -> dict[str, Any]:
    return {
        "name": "files",
        "stdio": {
            "command": "python",
            "args": ["-m", SERVER_MODULE, "--tools-file", str(tools_file), "--bad-tools", "1"],
            "cwd": str(REPO_ROOT),
        },
        "watch": [str(tools_file)],
    }


async def test_operator_console_in_a_headless_browser(tmp_path: Path, browser_binaries: tuple[str, str]) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(["search", "fetch"]))
    backdate(tools_file)
    broken = {"name": "broken", "stdio": {"command": str(tmp_path / "missing-upstream")}}
    cfg = write_config(tmp_path, sources=[tools_source(tools_file), broken])
    doc = json.loads(cfg.read_text())
    doc["views"] = [{"name": "search-only", "sources": ["files"], "tools": {"allow": ["files__search"]}}]
    cfg.write_text(json.dumps(doc))
    backdate(cfg)
    async with served_gateway(cfg) as served:
        engine = served.gateway.engine
        first = engine.current_revision
        assert first is not None
        with chromium(browser_binaries) as driver:
            ui = served.base_url + "/ui/"

            def log_in() -> None:
                driver.get(ui)
                wait_for(driver, "the login form", lambda d: d.find_element(By.ID, "token").is_displayed())
                driver.find_element(By.ID, "token").send_keys(OPERATOR_TOKEN)
                driver.find_element(By.ID, "login-button").click()
                wait_for(driver, "the live pill", lambda d: text_of(d, "#live") == "live")
                wait_for(driver, f"revision {first}", lambda d: text_of(d, "#now-revision") == str(first))

            await step(log_in)
            view_row = "#view-table tr[data-view='search-only']"
            await step(lambda: wait_for(driver, "the view's row", lambda d: "/mcp/search-only" in text_of(d, view_row)))
            assert text_of(driver, view_row + " td:nth-child(3)") == "1"  # its one tool
            # Search mode (ADR 0029): an index built on this revision (what its first find_tools
            # does) shows with its size and build time once the page next reads status.
            live = engine.current
            assert live is not None
            live.generation.search_index(None)
            assert await step(lambda: driver.find_element(By.ID, "token").get_attribute("value")) == ""

            # A run holds the current revision; then a watched file changes.
            hold = engine.holds.create(first, 120, owner="owner::nightly-eval")
            tools_file.write_text(json.dumps(["search", "fetch", "summarize"]))
            backdate(tools_file)

            def sees_new_revision_and_old_draining() -> None:
                wait_for(driver, f"revision {first + 1}", lambda d: text_of(d, "#now-revision") == str(first + 1))
                row = f"#gen-table tr[data-revision='{first}']"
                wait_for(driver, "the old revision retiring", lambda d: "retiring" in text_of(d, row))
                old = text_of(driver, row)
                assert "1" in text_of(driver, row + " td.pins"), old
                assert "nightly-eval" in old, old
                new = text_of(driver, f"#gen-table tr[data-revision='{first + 1}']")
                # Why: the watched file (a reconnect of the broken source may share the cycle).
                assert "watched file changed" in new and "files" in new, new
                count = "return document.querySelectorAll(arguments[0]).length"
                assert driver.execute_script(count, f"#timeline rect.bar.retiring[data-revision='{first}']") == 1
                assert driver.execute_script(count, "#timeline path.hold") >= 1
                assert f"revision {first + 1} published" in text_of(driver, "#event-log")

            await step(sees_new_revision_and_old_draining)
            index_row = f"#search-table tr[data-index='{first}:']"
            await step(lambda: wait_for(driver, "the index row", lambda d: "whole catalog" in text_of(d, index_row)))
            assert text_of(driver, index_row + " td:nth-child(6)").endswith(" ms")
            await step(lambda: driver.save_screenshot(str(tmp_path / "draining.png")))

            engine.holds.release(hold.id)
            await step(
                lambda: wait_for(
                    driver,
                    "the old revision closed",
                    lambda d: "closed" in text_of(d, f"#gen-table tr[data-revision='{first}']"),
                )
            )

            def refresh_and_read_reasons() -> None:
                driver.find_element(By.ID, "refresh-all").click()
                wait_for(driver, "the refresh answer", lambda d: "cycle #" in text_of(d, "#action-answer"))
                answer = text_of(driver, "#action-answer")
                assert "source broken is failed:" in answer, answer
                broken_row = text_of(driver, "#source-table tr[data-source='broken']")
                assert "failed" in broken_row and "never" in broken_row, broken_row
                reason = text_of(driver, "#source-table tr[data-source='broken'] td.last-error")
                assert reason and reason != "—", broken_row
                assert "missing-upstream" not in reason  # sanitized (I12)
                files_row = text_of(driver, "#source-table tr[data-source='files']")
                assert "tools.json" in files_row, files_row  # its tracked file
                assert "tool rejected: name must match" in files_row, files_row  # a rejected entry, with its reason
                assert "source broken is failed" in text_of(driver, "#conditions")

            await step(refresh_and_read_reasons)

            # Take the picture for the README at the state an operator would want to see: a
            # revision draining with a hold on it.
            second = engine.current_revision
            assert second is not None
            live = engine.current
            assert live is not None
            session = engine.sessions.create("owner::nightly-eval", live.generation, policy=GrantPolicy.FOLLOW)
            await step(
                lambda: wait_for(
                    driver,
                    "the new session",
                    lambda d: "follow" in text_of(d, f"#session-table tr[data-session='{session.id}']"),
                )
            )
            hold = engine.holds.create(second, 300, owner="owner::nightly-eval")
            tools_file.write_text(json.dumps(["search", "fetch", "summarize", "translate"]))
            backdate(tools_file)
            await step(
                lambda: wait_for(driver, "the next revision", lambda d: text_of(d, "#now-revision") == str(second + 1))
            )
            await step(
                lambda: wait_for(
                    driver,
                    "it draining",
                    lambda d: "retiring" in text_of(d, f"#gen-table tr[data-revision='{second}']"),
                )
            )

            def screenshot() -> None:
                height = driver.execute_script("return document.documentElement.scrollHeight")
                driver.set_window_size(1400, min(int(height) + 40, 2400))
                out = REPO_ROOT / "build" / "console.png"
                out.parent.mkdir(exist_ok=True)
                driver.save_screenshot(str(out))
                if os.environ.get("UPDATE_CONSOLE_SCREENSHOT") == "1":
                    shutil.copyfile(out, REPO_ROOT / "docs" / "console.png")

            await step(screenshot)
            engine.holds.release(hold.id)

            def no_errors_and_no_token_in_urls() -> None:
                entries = driver.get_log("browser")
                errors = [e for e in entries if e["level"] == "SEVERE"]
                assert not errors, errors
                urls = [driver.current_url]
                for entry in driver.get_log("performance"):
                    message = json.loads(entry["message"])["message"]
                    if message["method"] == "Network.requestWillBeSent":
                        urls.append(message["params"]["request"]["url"])
                        urls.append(message["params"].get("documentURL", ""))
                assert any("/v1/events" in u for u in urls), urls
                assert not [u for u in urls if OPERATOR_TOKEN in u], urls
                assert OPERATOR_TOKEN not in driver.page_source
                assert driver.execute_script("return history.length") >= 1
                assert OPERATOR_TOKEN not in driver.execute_script("return location.href + document.cookie")

            await step(no_errors_and_no_token_in_urls)

            def logs_out() -> None:
                driver.find_element(By.ID, "logout").click()
                wait_for(driver, "the login form again", lambda d: d.find_element(By.ID, "login").is_displayed())
                stored = driver.execute_script("return sessionStorage.length + document.cookie.length")
                assert stored == 0, stored

            await step(logs_out)


async def test_console_causes_catalog_sessions_and_login_state(
    tmp_path: Path, browser_binaries: tuple[str, str]
) -> None:
    """Issue 28: nothing but the login form shows before login; a failed source shows its typed
    cause and last stderr lines (folded); long diagnostics fold; the catalog view lists every
    served name with its source, trust and holders, and filters; an operator creates a session
    (its token shown once), grants, revokes and deletes it; logging out clears the token shown."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(["search", "fetch"]))
    backdate(tools_file)
    files = tools_source(tools_file)
    files["stdio"]["args"][-1] = "4"  # --bad-tools 4: more rejected entries than stay unfolded
    script = "import sys; sys.stderr.write('db: cannot open state.sqlite\\n'); sys.exit(3)"
    exits = {"name": "db", "stdio": {"command": "python", "args": ["-c", script]}}
    cfg = write_config(tmp_path, sources=[files, exits])
    async with served_gateway(cfg) as served:
        engine = served.gateway.engine
        with chromium(browser_binaries) as driver:

            def nothing_before_login() -> None:
                driver.get(served.base_url + "/ui/")
                wait_for(driver, "the login form", lambda d: d.find_element(By.ID, "token").is_displayed())
                visible_cards = "return [...document.querySelectorAll('main .card')].filter(e => e.offsetParent).length"
                shown = driver.execute_script(visible_cards)
                assert shown == 0, shown
                assert not driver.find_element(By.ID, "app").is_displayed()
                driver.find_element(By.ID, "token").send_keys(OPERATOR_TOKEN)
                driver.find_element(By.ID, "login-button").click()
                wait_for(driver, "the catalog", lambda d: "files__search" in text_of(d, "#catalog-table"))
                assert driver.find_element(By.ID, "now").is_displayed()

            await step(nothing_before_login)

            def causes_and_folds() -> None:
                row = "#source-table tr[data-source='db']"
                wait_for(driver, "the db cause", lambda d: "process_exited" in text_of(d, row + " .cause"))
                assert "process exited with code 3" in text_of(driver, row + " td.last-error")
                assert "exit code 3" in text_of(driver, row + " .cause")
                folded = "return document.querySelector(arguments[0]).open"
                assert driver.execute_script(folded, row + " details.stderr-tail") is False  # folded until asked
                driver.execute_script(
                    "document.querySelector(arguments[0]).click()", row + " details.stderr-tail summary"
                )
                wait_for(
                    driver, "the stderr lines", lambda d: "cannot open state.sqlite" in text_of(d, row + " pre.stderr")
                )
                driver.execute_script("render()")  # the next update re-renders the rows: the fold stays open
                assert driver.execute_script(folded, row + " details.stderr-tail") is True
                rejected = "#source-table tr[data-source='files'] td.rejected details"
                assert driver.execute_script(folded, rejected) is False
                assert "4 diagnostics" in text_of(driver, rejected + " summary")

            await step(causes_and_folds)

            def catalog_view_and_filter() -> None:
                row = text_of(driver, "#catalog-table tr[data-name='files__search']")
                assert "tool" in row and "files" in row and "search" in row and "trusted" in row, row
                box = driver.find_element(By.ID, "catalog-filter")
                box.send_keys("fetch")
                visible = driver.execute_script(
                    "return Array.from(document.querySelectorAll('#catalog-table tbody tr'))"
                    ".filter(r => !r.hidden).map(r => r.dataset.name)"
                )
                assert "files__fetch" in visible and "files__search" not in visible, visible
                box.clear()
                box.send_keys(" ")  # clearing fires no input event in every driver: an empty query shows all
                driver.execute_script("arguments[0].value=''; arguments[0].dispatchEvent(new Event('input'))", box)

            await step(catalog_view_and_filter)

            def create_session() -> str:
                driver.find_element(By.ID, "new-owner").send_keys("alice")
                driver.find_element(By.CSS_SELECTOR, "#new-policy option[value='explicit']").click()
                driver.find_element(By.ID, "new-names").send_keys("files__search")
                driver.find_element(By.ID, "session-create").click()
                wait_for(driver, "the token", lambda d: "shown once" in text_of(d, "#session-token"))
                shown = text_of(driver, "#session-token")
                session_id = shown.split()[1]
                wait_for(
                    driver,
                    "the session row",
                    lambda d: "explicit" in text_of(d, f"#session-table tr[data-session='{session_id}']"),
                )
                wait_for(
                    driver,
                    "its grant in the catalog",
                    lambda d: session_id in text_of(d, "#catalog-table tr[data-name='files__search'] td.holders"),
                )
                return session_id

            session_id = await step(create_session)
            made = engine.sessions.get(session_id)
            assert made is not None and made.owner == "owner::alice"
            token_shown = await step(lambda: text_of(driver, "#session-token"))
            assert made.token in token_shown  # the real token, shown once

            def grant_revoke_delete() -> None:
                driver.find_element(By.CSS_SELECTOR, f"#session-pick option[value='{session_id}']").click()
                names = driver.find_element(By.ID, "session-names")
                names.send_keys("files__fetch")
                driver.find_element(By.ID, "session-grant").click()
                wait_for(driver, "the grant", lambda d: "granted to" in text_of(d, "#session-answer"))
                names.clear()
                names.send_keys("files__search")
                driver.find_element(By.ID, "session-revoke").click()
                wait_for(driver, "the revocation", lambda d: "revoked from" in text_of(d, "#session-answer"))
                wait_for(
                    driver,
                    "the catalog without it",
                    lambda d: session_id not in text_of(d, "#catalog-table tr[data-name='files__search'] td.holders"),
                )
                assert session_id in text_of(driver, "#catalog-table tr[data-name='files__fetch'] td.holders")

            await step(grant_revoke_delete)
            live = engine.sessions.get(session_id)
            assert live is not None and sorted(live.grants) == ["tool:files__fetch"]

            def delete_and_log_out() -> None:
                driver.find_element(By.ID, "session-delete").click()
                wait_for(driver, "the deletion", lambda d: "deleted session" in text_of(d, "#session-answer"))
                wait_for(driver, "the row gone", lambda d: session_id not in text_of(d, "#session-table"))
                driver.find_element(By.ID, "logout").click()
                wait_for(driver, "the login form again", lambda d: d.find_element(By.ID, "login").is_displayed())
                assert driver.execute_script("return document.getElementById('session-token').textContent") == ""
                assert not driver.find_element(By.ID, "app").is_displayed()
                errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
                assert not errors, errors

            await step(delete_and_log_out)
            assert engine.sessions.get(session_id) is None


async def test_console_lists_a_parked_call_and_approves_it(tmp_path: Path, browser_binaries: tuple[str, str]) -> None:
    """Approvals (ADR 0034): a call parked for an approval shows in the console with its tool,
    caller, revision and digests; Approve lets it run (on the revision shown), and the row
    then says who approved it."""
    from mcp_reconciler.reconciler.approvals import ApprovalRequest
    from tests.api.conftest import mcp_client, upstream_source

    cfg = write_config(tmp_path, sources=[upstream_source("up", "a", "b")])
    doc = json.loads(cfg.read_text())
    doc["approvals"] = ["up__a"]
    cfg.write_text(json.dumps(doc))
    async with served_gateway(cfg) as served:
        parked = anyio.Event()

        def on_request(request: ApprovalRequest) -> None:
            if request.state == "pending":
                parked.set()

        served.gateway.engine.approvals.add_listener(on_request)
        revision = served.gateway.engine.current_revision
        results: list[Any] = []
        async with mcp_client(served) as mcp, anyio.create_task_group() as tg:

            async def call() -> None:
                results.append(await mcp.call_tool("up__a", {"x": "1"}))

            tg.start_soon(call)
            with anyio.fail_after(WAIT_S):
                await parked.wait()
            with chromium(browser_binaries) as driver:

                def log_in_and_approve() -> None:
                    driver.get(served.base_url + "/ui/")
                    wait_for(driver, "the login form", lambda d: d.find_element(By.ID, "token").is_displayed())
                    driver.find_element(By.ID, "token").send_keys(OPERATOR_TOKEN)
                    driver.find_element(By.ID, "login-button").click()
                    row = "#approval-table tr[data-approval]"
                    wait_for(driver, "the parked call", lambda d: "up__a" in text_of(d, row))
                    assert "pending" in text_of(driver, row) and str(revision) in text_of(driver, row)
                    # One script call: the table re-renders every two seconds (handles go stale).
                    driver.execute_script("document.querySelector('button[data-approve]').click()")
                    wait_for(driver, "the approval", lambda d: "approved" in text_of(d, "#approval-answer"))

                await step(log_in_and_approve)
                await until(lambda: results, what="results", timeout_s=WAIT_S)
                assert not results[0].is_error
                assert (results[0].meta or {})["io.mcp-reconciler/revision"] == revision
                await step(
                    lambda: wait_for(
                        driver, "who approved", lambda d: "by operator::" in text_of(d, "#approval-table")
                    )
                )
