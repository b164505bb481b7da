"""Issue 30's attack as a test: a canary written as one user through every kind of content,
the user erased, the erasure epoch waited (the key-encryption key rotated), a checkpoint
and a clean stop; then every file under the directory that holds the Postgres cluster, the
JetStream store and the service's data (heap, indexes, TOAST, pg_wal, pg_xact, logs, block
files) is read for the canary: none holds it. Another user's canary, not erased, is in no
file in clear either: events, read models, stored replies and preview parts are all sealed.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from chronicle_client import ChronicleClient

from adapters.auth import TokenAuthority
from adapters.embedded import EmbeddedNats, EmbeddedPostgres
from entrypoints.bootstrap import bootstrap
from entrypoints.read_models import PROJECTIONS
from tests.conftest import make_settings
from tests.integration.test_sealed_read_models import write_canary
from tests.rows import erased_key_rotated
from tests.waiting import eventually

PREVIEW_BYTES = 600 * 1024  # over 512 KiB: it goes up through the object store in parts


@pytest.fixture
def own_servers() -> Iterator[tuple[Path, EmbeddedPostgres, EmbeddedNats]]:
    """A Postgres and a nats-server of this test's own, both storing under one directory the
    test reads whole. (Not pytest's: pytest removes older runs' directories, another run's included.)"""
    with tempfile.TemporaryDirectory(prefix="chronicle-canary-") as scratch:
        root = Path(scratch)
        postgres, nats = EmbeddedPostgres(root), EmbeddedNats(root)
        try:
            postgres.start()
            nats.start()
            yield root, postgres, nats
        finally:
            nats.stop()
            postgres.stop()


async def write_everything(client: ChronicleClient, canary: str) -> None:
    """The canary through every kind of content: a session, a conversation's title, tags and
    messages, HITL prompts, data, edits and feedback, an artifact's layout, query and
    examples, variations, a preview uploaded in parts, a job's request, and an
    optimization's name, project, dataset, round extras, trial candidates, metrics and
    extras (a candidate's origin and ops among them), an invalidation reason, a round's best
    candidate and candidates, a stop reason."""
    await write_canary(client, canary)
    artifact = await client.artifacts.store({"type": "page", "label": "preview"}, query=f"{canary} preview query")
    preview = (canary.encode() + b" ") * (PREVIEW_BYTES // (len(canary) + 1))
    await client.artifacts.cache_preview(artifact.artifact_id, preview)
    assert await client.artifacts.preview(artifact.artifact_id) == preview
    job = await client.jobs.request(f"a summary of the {canary} notes", "summary")
    assert (await client.jobs.wait(job.job_id, timeout=60)).status == "completed"

    optimization = await client.optimizations.start(
        name=f"{canary} optimization", optimizer=f"{canary}-optimizer", project=f"{canary}-project",
        dataset=f"{canary}-dataset",
    )
    started = await client.optimizations.start_round(optimization.optimization_id, extras={"note": f"{canary} round"})
    # (Candidate ids are ids: they stay in clear, in this read model and the lineage one; see docs/architecture.md.)
    recorded = await client.optimizations.record_trials(started.round_id, [
        {"candidate": {"prompt": f"{canary} candidate {n}"}, "candidate_id": f"candidate-{n}", "score": n / 10,
         "metrics": {"latency": n, "judge": f"{canary} metric"}, "dataset": f"{canary}-split",
         "extras": {"note": f"{canary} extra", "origin": f"{canary} origin", "ops": [f"{canary} op"],
                    "parents": [f"candidate-{n - 1}"] if n else []}}
        for n in range(4)
    ])
    await client.optimizations.invalidate_trial(recorded.trials[3].trial_id, f"{canary} leaked")
    await client.optimizations.end_round(
        started.round_id, best_candidate={"prompt": f"{canary} best"}, candidates=[{"prompt": f"{canary} kept"}],
        extras={"pareto_front": [f"{canary} front"]}, stop_reason=f"{canary} stopped",
    )
    # Read back in clear by their owner: opened at query time.
    [round_] = await client.optimizations.history(optimization.optimization_id)
    assert round_["extra"] == {"note": f"{canary} round", "pareto_front": [f"{canary} front"]}
    assert round_["trials"][3]["invalid"]["reason"] == f"{canary} leaked"
    assert round_["trials"][0]["candidate"] == {"prompt": f"{canary} candidate 0"}
    summary = await client.optimizations.get(optimization.optimization_id)
    assert (summary.name, summary.project, summary.stop_reason) == (
        f"{canary} optimization", f"{canary}-project", f"{canary} stopped")
    lineage = await client.optimizations.lineage(optimization.optimization_id, "candidate-2")
    assert [(c.candidate_id, c.origin, c.ops) for c in lineage.lineage[:2]] == [
        ("candidate-2", f"{canary} origin", [f"{canary} op"]), ("candidate-1", f"{canary} origin", [f"{canary} op"])]
    front = await client.optimizations.pareto(optimization.optimization_id)
    assert front.front[0].candidate == {"prompt": f"{canary} candidate 2"}  # (the best valid trial)


def files_holding(root: Path, needle: bytes) -> dict[str, int]:
    """Each file under `root` holding `needle`, and how often."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            count = path.read_bytes().count(needle)
            if count:
                found[str(path.relative_to(root))] = count
    return found


async def test_after_an_erasure_no_file_under_the_data_directory_holds_the_users_content(
    own_servers: tuple[Path, EmbeddedPostgres, EmbeddedNats], authority: TokenAuthority
) -> None:
    root, postgres, nats = own_servers
    url = str(postgres.server.get_uri())
    erased_user, live_user = f"erased-{uuid.uuid4().hex[:8]}", f"live-{uuid.uuid4().hex[:8]}"
    erased_canary, live_canary = f"canary{uuid.uuid4().hex[:16]}", f"canary{uuid.uuid4().hex[:16]}"
    chronicle = await bootstrap(make_settings(url, nats.url, root / "data", erasure_epoch=1.0))
    try:
        prefix = chronicle.settings.subject_prefix
        erased, live, admin = [
            await ChronicleClient.connect(nats.url, authority.issue(user, claims=claims), prefix=prefix)
            for user, claims in ((erased_user, None), (live_user, None), ("admin-1", {"roles": ["admin"]}))
        ]
        try:
            await write_everything(erased, erased_canary)
            await write_everything(live, live_canary)
            erasure = await admin.request("cmd.user.erase", {"user_id": erased_user})
            await chronicle.positions.wait_for([p.name for p in PROJECTIONS], erasure["position"], 30)
        finally:
            for client in (erased, live, admin):
                await client.close()

        await eventually(functools.partial(erased_key_rotated, url, erased_user), "the key-encryption key rotated after the erasure", timeout=15)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
    finally:
        await chronicle.stop()
    postgres.stop()  # (cleanly: a shutdown checkpoint, every buffer in its file)
    nats.stop()

    # The scan is not hollow: the owners' ids are kept in clear and found in the WAL, and the
    # JetStream store's block files (events, preview parts) are among the files read.
    assert await asyncio.to_thread(files_holding, root / "postgres" / "pg_wal", live_user.encode())
    assert list((root / "nats").rglob("*.blk"))
    assert await asyncio.to_thread(files_holding, root, erased_canary.encode()) == {}
    assert await asyncio.to_thread(files_holding, root, live_canary.encode()) == {}
