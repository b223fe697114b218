"""`test-client --browser chromium|firefox --script FILE.js` against real headless browsers.

Debian's chromium (through chromedriver) and firefox-esr, installed by scripts/system-deps.sh:
never skipped. Two runs per browser, each one browser process: the OpenAI Chat fixture
with a script that behaves per case (tests/tools/clients/browser/by_case.mjs: a fresh
TextDecoder per read on utf8 seeds 1 and 2, a correct client on the baseline and utf8
seed 3, a crash with console output on bom, a hang on dataless), and the browser's own
EventSource on the raw-text stream. Every seed of utf8 is checked by hand (reported).
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sse_proxy.cli import main
from sse_proxy.errors import UsageError
from sse_proxy.server.keys import STREAM_TAPS
from sse_proxy.tools.stack import proxy_stack
from sse_proxy.tools.testclient.browser.page import PageReads
from sse_proxy.tools.testclient.commands import rerun_line
from sse_proxy.tools.testclient.harness import Case, HarnessOptions, run_test_client

CLIENTS = Path(__file__).parent / "clients" / "browser"
BROWSERS = ("chromium", "firefox")


def _run(
    tmp_path: Path, script: str, *args: str, **options: Any
) -> tuple[int, dict[str, Any], str]:
    report = tmp_path / "report.json"
    out = tmp_path / "out.txt"
    opts = HarnessOptions(
        command=(),
        report=str(report),
        script=str(CLIENTS / script),
        jobs=2,
        **options,
    )
    with out.open("w", encoding="utf-8") as stream:
        code = run_test_client(opts, out=stream)
    return code, json.loads(report.read_text("utf-8")), out.read_text("utf-8")


def _cases(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["cases"]}


@pytest.mark.parametrize("browser", BROWSERS)
def test_a_fetch_client_in_the_browser(tmp_path: Path, browser: str) -> None:
    code, report, text = _run(
        tmp_path,
        "by_case.mjs",
        browser=browser,
        only=("utf8", "tokens:chars", "tokens:midword"),
        seeds=3,
        timeout=10.0,  # 120-odd cuts, each waiting for the page to report its read
    )
    cases = _cases(report)
    assert code == 1, text
    for seed in (1, 2):  # a fresh TextDecoder per read: U+FFFD, every cut read apart
        case = cases[f"utf8 seed={seed}"]
        assert case["outcome"] == "wrong", text
        assert case["diagnosis"]["family"] == "character boundary", text
        assert "\ufffd" in case["output"]
        got = case["delivery"]
        assert got["cuts"] > 50
        assert got["read_apart"] == got["cuts"], case
    correct = cases["utf8 seed=3"]
    assert correct["outcome"] == "pass", text
    assert cases["tokens:chars"]["outcome"] == "crash"
    tail = cases["tokens:chars"]["stderr_tail"]
    assert "TypeError: the client gave up on purpose" in tail, tail
    assert 'console.log: about to fail {"on":"tokens:chars"}' in tail, tail
    assert str(CLIENTS / "by_case.mjs") in tail  # the page's URLs as the files they are
    assert cases["tokens:midword"]["outcome"] == "hang"
    assert "--browser" in text
    repro = cases["utf8 seed=1"]["reproduce"]
    assert repro.endswith(
        f"--only utf8 --seed 1 --timeout 10 --browser {browser} --script {CLIENTS / 'by_case.mjs'}"
    )
    assert cases["utf8 seed=1"]["by_hand"] is None
    assert "fix (javascript)" in text


@pytest.mark.parametrize("browser", BROWSERS)
def test_a_fetch_client_that_reads_every_choice_and_asks_for_one(
    tmp_path: Path, browser: str
) -> None:
    """It joins every choice of a chunk and its body has no ``n``: ``choices_n2`` is not
    applicable to it, and it passes the shapes, the faults and the rest (every group, one
    seed, was run by hand: 41 cases, 0 failed, 2 not applicable, in each browser)."""
    code, report, text = _run(
        tmp_path,
        "every_choice.mjs",
        browser=browser,
        only=("baseline", "shapes", "faults"),
        seeds=1,
    )
    assert code == 0, text
    outcomes = {c["name"]: c["outcome"] for c in report["cases"]}
    assert outcomes.pop("shapes:choices_n2") == "not_applicable"
    assert outcomes.pop("shapes:include_usage") == "not_applicable"
    assert set(outcomes.values()) == {"pass"}, outcomes
    assert "not applicable: the request did not ask for n > 1" in text


@pytest.mark.parametrize("browser", BROWSERS)
def test_the_browsers_own_event_source(tmp_path: Path, browser: str) -> None:
    code, report, text = _run(
        tmp_path,
        "event_source.mjs",
        browser=browser,
        dialect="text",
        only=("utf8",),
        seeds=1,
    )
    assert code == 0, text
    for case in report["cases"]:
        assert case["outcome"] == "pass", text
        assert case["delivery"]["read_apart"] == case["delivery"]["cuts"] > 0


def test_a_script_without_a_default_export_is_a_wiring_error(tmp_path: Path) -> None:
    """Like a failing baseline: the script never ran as a client, so no parser is blamed."""
    code, report, text = _run(
        tmp_path, "no_default_export.mjs", browser="chromium", only=("baseline", "utf8"), seeds=1
    )
    assert code == 1
    (case,) = report["cases"]  # the run stopped at the baseline
    assert report["cases_not_run"] == 1
    diagnosis = case["diagnosis"]
    assert diagnosis["family"] == "wiring (the script's default export)"
    assert diagnosis["reason"].startswith(
        "no_default_export.mjs has no default export that is a function"
    )
    assert "export default async function" in diagnosis["hint"]
    assert "parser (crash)" not in text
    assert "Check that the script's default export fetches the url" in text


def test_the_repro_line_reruns_the_browser_case(capsys: pytest.CaptureFixture[str]) -> None:
    """The reproduce line of a browser case, run as printed, runs that case in the browser."""
    options = HarnessOptions(
        command=(), browser="chromium", script=str(CLIENTS / "decoder_per_read.mjs")
    )
    line = shlex.split(rerun_line(options, Case("utf8", "utf8", 2)))
    assert line[:2] == ["sse-proxy", "test-client"]
    assert line[-4:] == ["--browser", "chromium", "--script", str(CLIENTS / "decoder_per_read.mjs")]
    code = main(line[1:])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "first failing case: utf8 seed=2" in out
    assert "character boundary" in out
    assert "1 cases, 0 passed, 1 failed" in out


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"browser": "chromium"}, "--browser needs --script"),
        ({"script": "x.mjs"}, "--script needs --browser"),
        ({"browser": "chromium", "script": "/nonexistent.mjs"}, "no such file"),
        ({"browser": "safari", "script": str(CLIENTS / "event_source.mjs")}, "must be one of"),
        (
            {
                "browser": "chromium",
                "script": str(CLIENTS / "event_source.mjs"),
                "command": ("true",),
            },
            "either -- CMD or --browser",
        ),
    ],
)
def test_usage_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        run_test_client(HarnessOptions(**{"command": (), **options}))


async def _stream(url: str, reads: PageReads, *, honest: bool) -> None:
    """A client that reads the whole stream, telling ``reads`` what it took (or nothing)."""
    async with aiohttp.ClientSession() as session:
        reads.tell({"fetch": "start"})
        async with session.post(f"{url}/v1/text", json={"stream": True}) as resp:
            ident = resp.headers["X-SSE-Proxy-Stream-Id"]
            reads.tell({"fetch": "open", "id": ident})
            taken = 0
            async for chunk in resp.content.iter_any():
                taken += len(chunk)
                if honest:
                    reads.tell({"id": ident, "taken": taken})


@pytest.mark.parametrize("honest", [True, False])
def test_cuts_wait_on_what_the_client_reports(honest: bool) -> None:
    """The kernel sees a client that reads at once; a cut still waits until the client's
    code says it took the bytes before it. One that never says so has none read apart."""
    ex = asyncio.run(_through_proxy(honest))
    got = ex.delivery
    assert got.cuts > 50
    if honest:
        assert got.read_apart == got.cuts
    else:
        assert got.read_apart == 0


async def _through_proxy(honest: bool) -> Any:
    reads = PageReads()
    async with proxy_stack(mode="chaos", chaos="utf8", seed=1, log_level="warning") as stack:
        deliveries: list[Any] = []

        def tap(ex: Any) -> Any:
            deliveries.append(ex)
            return reads.tap(ex)

        assert stack._proxy is not None
        stack._proxy.app[STREAM_TAPS].append(tap)
        await asyncio.wait_for(_stream(stack.url, reads, honest=honest), 30)
    (ex,) = deliveries
    return ex


_PROBED_CASE = """import { stream } from "./lib/correct_fetch.mjs";

// Tells the test where the page server put this script, then waits while the test probes
// it from outside the browser; then a correct client.
export default async function (args) {
  await fetch(REPORT + "?at=" + encodeURIComponent(import.meta.url), { mode: "no-cors" });
  return stream(args);
}
"""


async def _probe_page_server(script_url: str) -> dict[str, int]:
    """A plain HTTP client (not the browser) asking the page server, during the run, for
    the files beside the script: each answer's status."""
    base, _, _name = script_url.rpartition("/")  # http://127.0.0.1:P/SECRET/script
    origin = "/".join(base.split("/")[:3])
    port = origin.rsplit(":", 1)[1]
    secret = base[len(origin) + 1 :].split("/", 1)[0]
    guessed = ("y" if secret[0] == "x" else "x") + secret[1:]  # one character off, never it
    asked = {
        "the script": (f"{base}/case.mjs", None),
        "what it imports": (f"{base}/lib/correct_fetch.mjs", None),
        ".env": (f"{base}/.env", None),
        ".env, encoded": (f"{base}/%2Eenv", None),
        ".git/config": (f"{base}/.git/config", None),
        "lib/.hidden.mjs": (f"{base}/lib/.hidden.mjs", None),
        "not a module": (f"{base}/notes.txt", None),
        "no secret": (f"{origin}/script/.env", None),
        "no secret, the script": (f"{origin}/script/case.mjs", None),
        "a guessed secret": (f"{base.replace(secret, guessed, 1)}/case.mjs", None),
        "a rebound name": (f"{base}/case.mjs", f"attacker.invalid:{port}"),
        "another port": (f"{base}/case.mjs", "127.0.0.1:1"),
    }
    got: dict[str, int] = {}
    async with aiohttp.ClientSession(trust_env=False) as session:
        for what, (url, host) in asked.items():
            headers = {"Host": host} if host else {}
            async with session.get(url, headers=headers, allow_redirects=False) as resp:
                got[what] = resp.status
    return got


def test_the_page_server_serves_the_case_files_to_its_browser_only(tmp_path: Path) -> None:
    """A browser script with a real .env, .git/config and a text file beside it: while the
    run is under way, a plain HTTP client gets none of them (nor the script, without the
    run's secret or with a Host that is not the page server's own); the run still passes."""
    from tests.support.browser import ThreadLoop

    app = tmp_path / "app"
    (app / "lib").mkdir(parents=True)
    (app / ".git").mkdir()
    (app / ".env").write_text("OPENAI_API_KEY=sk-in-dotenv\n", encoding="utf-8")
    (app / ".git" / "config").write_text("[remote]\n url = secret\n", encoding="utf-8")
    (app / "notes.txt").write_text("private\n", encoding="utf-8")
    (app / "lib" / ".hidden.mjs").write_text("export default 1;\n", encoding="utf-8")
    (app / "lib" / "correct_fetch.mjs").write_bytes((CLIENTS / "correct_fetch.mjs").read_bytes())
    probes: list[dict[str, int]] = []

    async def report(request: aiohttp.web.Request) -> aiohttp.web.Response:
        if not probes:
            probes.append(await _probe_page_server(request.query["at"]))
        return aiohttp.web.Response(text="ok")

    async def serve() -> tuple[aiohttp.web.AppRunner, int]:
        server = aiohttp.web.Application()
        server.router.add_get("/report", report)
        runner = aiohttp.web.AppRunner(server, access_log=None)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, int(runner.addresses[0][1])

    loop = ThreadLoop(60.0)
    try:
        runner, port = loop.run(serve())
        script = _PROBED_CASE.replace("REPORT", json.dumps(f"http://127.0.0.1:{port}/report"))
        (app / "case.mjs").write_text(script, encoding="utf-8")
        report_json = tmp_path / "report.json"
        opts = HarnessOptions(
            command=(),
            report=str(report_json),
            script=str(app / "case.mjs"),
            browser="chromium",
            only=("utf8",),
            seeds=1,
        )
        with (tmp_path / "out.txt").open("w", encoding="utf-8") as out:
            code = run_test_client(opts, out=out)
        loop.run(runner.cleanup())
    finally:
        loop.close()
    assert probes, "the script never reported its URL"
    (got,) = probes
    assert got == {
        "the script": 200,
        "what it imports": 200,
        ".env": 404,
        ".env, encoded": 404,
        ".git/config": 404,
        "lib/.hidden.mjs": 404,
        "not a module": 404,
        "no secret": 404,
        "no secret, the script": 404,
        "a guessed secret": 404,
        "a rebound name": 403,
        "another port": 403,
    }, got
    assert code == 0, (tmp_path / "out.txt").read_text("utf-8")
    cases = json.loads(report_json.read_text("utf-8"))["cases"]
    assert cases
    assert all(c["outcome"] == "pass" for c in cases), cases
