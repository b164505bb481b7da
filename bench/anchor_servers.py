"""The anchors the benchmarks start beside Chronicle, each a process of its own.

`python -m bench.anchor_servers bare NATS_URL SUBJECT`: a bare nats-py responder that answers
every request with a small JSON (the ceiling for a Python service on this bus).
`python -m bench.anchor_servers card NATS_URL SUBJECT DATABASE_URL`: the design card's stack used
plainly: an eventsourcing Application on its Postgres recorder, one aggregate created and saved
per request (one event, one save, one transaction), answering over NATS; saves run in a
thread pool so that requests in flight overlap as far as the recorder lets them.
`python -m bench.anchor_servers gateway NATS_URL SUBJECT PORT` (`./dev bench gateway`): a bare
HTTP gateway, uvicorn (httptools, uvloop, as `chronicle http`) with a plain ASGI function that
forwards `POST /api/conversations/{id}/messages` to SUBJECT as one NATS request, the caller's
Authorization passed on, and answers 201 with the reply's data: no routing table, middleware,
validation or casing (the ceiling for a Python gateway process on this bus).
Each prints `ready` on stdout once subscribed (or listening) and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import signal
import sys
from typing import Any

import nats
import orjson
import uvicorn
import uvloop
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from nats.aio.msg import Msg
from psycopg.conninfo import conninfo_to_dict

REPLY = json.dumps({"ok": True, "data": {"position": 1}}).encode()
SAVE_THREADS = 8


class PlainMessage(Aggregate):
    """One added message, as a plain eventsourcing aggregate."""

    @event("Added")
    def __init__(self, conversation_id: str, role: str, content: str):
        self.conversation_id = conversation_id
        self.role = role
        self.content = content


class PlainMessages(Application):
    """The card's stack used plainly: the library's mapper, recorder and save."""

    def add(self, conversation_id: str, role: str, content: str) -> int:
        recordings = self.save(PlainMessage(conversation_id, role, content))
        return recordings[-1].notification.id


def postgres_environment(database_url: str) -> dict[str, str]:
    info = {name: str(value) for name, value in conninfo_to_dict(database_url).items()}  # a URL or key=value
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": info["dbname"],
        "POSTGRES_HOST": info.get("host", "127.0.0.1"),
        "POSTGRES_PORT": info.get("port", "5432"),
        "POSTGRES_USER": info.get("user", "postgres"),
        "POSTGRES_PASSWORD": info.get("password", ""),
        "POSTGRES_POOL_SIZE": str(SAVE_THREADS),
    }


async def serve(nats_url: str, subject: str, database_url: str | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    nc = await nats.connect(nats_url)
    if database_url is None:
        async def answer(msg: Msg) -> None:
            await msg.respond(REPLY)
    else:
        app = PlainMessages(env=postgres_environment(database_url))
        saves = concurrent.futures.ThreadPoolExecutor(SAVE_THREADS)

        pending: set[asyncio.Task[None]] = set()

        async def save_and_reply(msg: Msg) -> None:
            request = json.loads(msg.data)
            position = await loop.run_in_executor(
                saves, app.add, request["conversation_id"], request["role"], request["content"]
            )
            await msg.respond(json.dumps({"ok": True, "data": {"position": position}}).encode())

        async def answer(msg: Msg) -> None:
            # nats-py runs a subscription's callbacks one at a time: a task each lets saves overlap
            task = asyncio.create_task(save_and_reply(msg))
            pending.add(task)
            task.add_done_callback(pending.discard)

    await nc.subscribe(subject, queue="anchor", cb=answer, pending_msgs_limit=1_000_000)
    print("ready", flush=True)
    await stop.wait()
    await nc.drain()


async def gateway(nats_url: str, subject: str, port: int) -> None:
    nc = await nats.connect(nats_url)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        fields = orjson.loads(body)
        fields["conversation_id"] = scope["path"].split("/")[3]
        authorization = next(value for name, value in scope["headers"] if name == b"authorization").decode()
        reply = await nc.request(subject, orjson.dumps(fields), timeout=10, headers={"Authorization": authorization})
        answer = orjson.dumps({"success": True, **orjson.loads(reply.data)["data"]})
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]})
        await send({"type": "http.response.body", "body": answer})

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False,
                                           lifespan="on", http="httptools"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    print("ready", flush=True)
    await serving  # (uvicorn stops on SIGTERM by itself)
    await nc.drain()


def main(argv: list[str]) -> None:
    kind, nats_url, subject, *rest = argv
    if kind == "gateway":
        uvloop.run(gateway(nats_url, subject, int(rest[0])))
    else:
        asyncio.run(serve(nats_url, subject, rest[0] if kind == "card" else None))


if __name__ == "__main__":
    main(sys.argv[1:])
