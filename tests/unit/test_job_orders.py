"""A job's message on the work queue: workers take the service's own, and nothing else."""

from __future__ import annotations

import uuid

import orjson

from services.jobs.worker import SIGNATURE, JobOrders


def test_a_signed_order_is_read_back_and_a_changed_or_foreign_one_is_not() -> None:
    orders, job_id = JobOrders(b"k" * 32), uuid.uuid4()
    body, headers = orders.write(job_id, "alice")
    assert orders.read(body, headers) == (job_id, "alice")
    assert orders.read(body.replace(b"alice", b"bobby"), headers) is None  # the body changed
    assert JobOrders(b"x" * 32).read(body, headers) is None  # another key's
    assert orders.read(body, {"Nats-Msg-Id": headers["Nats-Msg-Id"]}) is None  # unsigned
    assert orders.read(b'{"ok": false}', {SIGNATURE: orders.signature(b'{"ok": false}')}) is None  # no order in it


def test_an_earlier_versions_order_names_its_job_in_its_message_id_and_carries_no_signature() -> None:
    job_id = uuid.uuid4()
    body = orjson.dumps({"job_id": job_id, "owner": "alice"})
    assert JobOrders.unsigned(body, {"Nats-Msg-Id": f"job:{job_id}"}) == (job_id, "alice")
    assert JobOrders.unsigned(body, {"Nats-Msg-Id": f"job:{uuid.uuid4()}"}) is None
    assert JobOrders.unsigned(body, None) is None
    assert JobOrders.unsigned(body, {"Nats-Msg-Id": f"job:{job_id}", SIGNATURE: "0" * 64}) is None
    assert JobOrders.unsigned(b"[1, 2]", {"Nats-Msg-Id": "job:x"}) is None
