"""The HITL error-recovery story, end to end: run with `./dev python examples/hitl_error_recovery.py`.

A person asks for a 1:1 sunset image; the orchestrator picks the wrong aspect ratio, the
image API refuses it, and the orchestrator pauses with an error_recovery checkpoint and
goes away. The person answers "use 1:1" while nobody is listening; a new orchestrator
process (here: a new client) waits on the same run id, receives the answer once, sees the
original request in the history, and finishes the job.

It starts Chronicle in-process (embedded Postgres and NATS unless CHRONICLE_DATABASE_URL /
CHRONICLE_NATS_URL are set).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chronicle_client.connection import ChronicleClient  # noqa: E402

from entrypoints import logs  # noqa: E402
from entrypoints.bootstrap import authority_for, bootstrap  # noqa: E402
from entrypoints.settings import Settings  # noqa: E402

SUPPORTED_RATIOS = {"1:1"}


def image_api(prompt: str, aspect_ratio: str) -> str:
    """A stand-in for an image model that only does square images."""
    if aspect_ratio not in SUPPORTED_RATIOS:
        raise ValueError(f"unsupported aspect ratio {aspect_ratio}; supported: {', '.join(sorted(SUPPORTED_RATIOS))}")
    return f"https://images.example/{prompt.replace(' ', '-')}-{aspect_ratio.replace(':', 'x')}.png"


def say(who: str, text: str) -> None:
    print(f"{who:>13} │ {text}")


async def first_orchestrator(client: ChronicleClient, conversation_id: object) -> str:
    """Picks the wrong ratio, fails, pauses, and exits without waiting."""
    await client.conversations.add_message(conversation_id, "agent", "Generating a sunset at aspect ratio 16:9.")
    try:
        image_api("sunset", "16:9")
    except ValueError as error:
        say("image API", f"error: {error}")
        handle = await client.hitl.pause(
            conversation_id,
            step="generate_image",
            checkpoint_type="error_recovery",
            prompt=f"The image API refused my request ({error}). Which aspect ratio should I use?",
            data={"error": str(error), "form": {"aspect_ratio": "16:9"}},
            conversation_mode=True,
        )
        say("orchestrator", f"paused run {handle.run_id} and shut down")
        return handle.run_id
    raise AssertionError("the image API was expected to fail")


async def person_answers(client: ChronicleClient) -> None:
    waiting = await client.hitl.list()
    assert waiting.items, "the paused checkpoint waits on the person"
    checkpoint = waiting.items[0]
    say("UI", f"waiting on you: [{checkpoint.checkpoint_type}] {checkpoint.prompt}")
    await client.hitl.resume(checkpoint.run_id, approved=True, edits={"aspect_ratio": "1:1"}, feedback="use 1:1")
    say("person", "use 1:1")


async def second_orchestrator(client: ChronicleClient, run_id: str) -> None:
    """A new process with the same run id gets the answer and the history, and finishes."""
    answer = await client.hitl.run(run_id).wait_for_resume(timeout=30)
    original = next(m.content for m in answer.history if m.role == "user" and m.message_type == "text")
    say("orchestrator", f"resumed: approved={answer.approved}, edits={answer.edits}, feedback={answer.feedback!r}")
    say("orchestrator", f"the original request, from the history: {original!r}")
    url = image_api("sunset", answer.edits["aspect_ratio"])
    await client.conversations.add_message(answer.conversation_id, "agent", f"Here is your sunset: {url}")
    say("image API", url)


async def main() -> None:
    settings = Settings()
    logs.configure("WARNING")
    chronicle = await bootstrap(settings)
    token = authority_for(settings).issue("demo-person")
    try:
        connect = lambda: ChronicleClient.connect(chronicle.nats_url, token, prefix=settings.subject_prefix)  # noqa: E731
        person, orchestrator = await connect(), await connect()
        started = await person.conversations.start(tags=["demo", "hitl"])
        await person.conversations.add_message(started.conversation_id, "user", "Make me a 1:1 sunset image")
        say("person", "Make me a 1:1 sunset image")

        run_id = await first_orchestrator(orchestrator, started.conversation_id)
        person.observed(orchestrator.last_position)  # the UI reads what the orchestrator wrote
        await orchestrator.close()
        await person_answers(person)
        restarted = await connect()
        await second_orchestrator(restarted, run_id)

        person.observed(restarted.last_position)
        final = await person.conversations.get(started.conversation_id)
        print("\nThe conversation as stored:")
        for message in final.messages:
            say(message.role, f"[{message.message_type}] {message.content}")
        await restarted.close()
        await person.close()
    finally:
        await chronicle.stop()


if __name__ == "__main__":
    asyncio.run(main())
