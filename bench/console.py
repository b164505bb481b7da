"""`./dev bench console`: the web console's figures on loopback, in Debian's Chromium.

Starts `chronicle serve` with its REST gateway (which serves the console) on a fresh
database, then: the bundle's size (raw and gzip, from the committed console_dist); the
inbox's time to interactive (from navigation to the open checkpoints listed and the live
stream listening, a signed-in tab, each load a fresh page); and the time from sending
`hitl.pause` to the checkpoint appearing in an open inbox (p50/p99), each pause answered
afterwards so the list stays short. Times are taken in this process around Playwright's
waits, so they include its round trip to the browser (a few ms at most).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import tempfile
import time
from pathlib import Path

from chronicle_client.connection import ChronicleClient
from playwright.async_api import Page, async_playwright

from adapters.embedded import free_port
from adapters.store.postgres import PostgresTarget, migrate
from bench.report import Report, show, under
from bench.servers import add_server_options, bench_servers
from bench.service import ServiceProcess
from entrypoints.gateways.console_manifest import DIST, built_files

CHROMIUM = "/usr/bin/chromium"
APPEAR_AIM_MS = 250.0  # a person sees a new checkpoint "at once"
TTI_AIM_MS = 1000.0


def bundle_sizes(names: list[str]) -> tuple[int, int]:
    """Bytes of these built files, raw and each gzip-compressed (as a server would send them)."""
    raw = zipped = 0
    for name in names:
        data = (DIST / name).read_bytes()
        raw += len(data)
        zipped += len(gzip.compress(data, 9))
    return raw, zipped


def first_page() -> list[str]:
    """What the inbox's page loads: index.html and the assets it names (the other sections'
    chunks load when opened)."""
    page = (DIST / "index.html").read_text()
    return ["index.html", *(name for name in built_files() if name.startswith("assets/") and f"/{name}" in page)]


async def time_to_interactive(page: Page, url: str) -> float:
    started = time.perf_counter()
    await page.goto(url)
    await page.get_by_role("status").filter(has_text="Live").wait_for()
    await page.get_by_text("No open checkpoints.").or_(page.get_by_role("list", name="Open checkpoints")).wait_for()
    return (time.perf_counter() - started) * 1000


async def measure(service: ServiceProcess, url: str, nats_url: str, args: argparse.Namespace, report: Report) -> None:
    user = "console-bench"
    token = service.token(user)
    client = await ChronicleClient.connect(nats_url, token, prefix=service.subject_prefix)
    try:
        conversation = (await client.conversations.start(title="console bench")).conversation_id
        await client.conversations.add_message(conversation, "user", "a request to pause on")
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            context = await browser.new_context()
            await context.add_init_script(f"sessionStorage.setItem('chronicle.token', {token!r})")
            loads = []
            for _ in range(args.loads + 1):
                page = await context.new_page()
                loads.append(await time_to_interactive(page, url))
                await page.close()
            loads = loads[1:]  # (the first load fills the browser's cache, as a person's first visit)
            page = await context.new_page()
            await time_to_interactive(page, url)
            appeared = []
            for n in range(args.pauses):
                prompt = f"bench checkpoint {n}"
                started = time.perf_counter()
                handle = await client.hitl.pause(conversation, step="bench", prompt=prompt)
                await page.get_by_role("heading", name=prompt).wait_for()
                appeared.append((time.perf_counter() - started) * 1000)
                await client.hitl.resume(handle.run_id, approved=True)
                await page.get_by_role("heading", name=prompt).wait_for(state="detached")
            await browser.close()
    finally:
        await client.close()
    raw, zipped = bundle_sizes(list(built_files()))
    report.add("console bundle, every section (raw)", raw / 1024, "KiB")
    report.add("console bundle, every section (gzip)", zipped / 1024, "KiB")
    raw, zipped = bundle_sizes(first_page())
    report.add("the inbox's page: what it loads (gzip)", zipped / 1024, "KiB", under(150.0), note=f"{raw / 1024:.0f} KiB raw")
    report.add_percentiles("inbox time to interactive (loopback, cached)", loads, aim_p95=under(TTI_AIM_MS),
                           note=f"{args.loads} loads")
    report.add_percentiles("hitl.pause sent -> checkpoint shown in an open inbox", appeared,
                           aim_p99=under(APPEAR_AIM_MS), note=f"{args.pauses} pauses")


def run(args: argparse.Namespace) -> tuple[Report, Path]:
    report = Report({"suite": "console", "loads": args.loads, "pauses": args.pauses})
    with bench_servers(args.database_url, args.nats_url) as servers, servers.fresh_database(False) as database, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-console-") as workdir:
        migrate(PostgresTarget(database))
        port = free_port()
        service = ServiceProcess.fresh(database, servers.nats_url, Path(workdir), {"CHRONICLE_HTTP_PORT": str(port)})
        service.start()
        with service.stopped_afterwards():
            asyncio.run(measure(service, f"http://127.0.0.1:{port}/", servers.nats_url, args, report))
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench console", description=__doc__.splitlines()[0])
    p.add_argument("--loads", type=int, default=20, help="inbox loads timed (default 20)")
    p.add_argument("--pauses", type=int, default=100, help="pauses timed to their checkpoint's appearance (default 100)")
    p.add_argument("--chromium", default=CHROMIUM, help=f"the Chromium to drive (default {CHROMIUM})")
    add_server_options(p)
    args = p.parse_args(argv)
    show(*run(args))


if __name__ == "__main__":
    main()
