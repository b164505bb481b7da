"""The probe and the watchdog on real sockets (no Postgres): a server that takes a
connection and never answers is told from one that answers, and a call blocked on a silent
server's connection is released."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from adapters.store.probe import NoAnswer, knock
from adapters.store.reachability import Watchdog


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


def answer_once(server: socket.socket, reply: bytes) -> threading.Thread:
    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(8)
            conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_server_that_answers_the_first_message_answers(listening: socket.socket) -> None:
    answer_once(listening, b"N")
    knock(f"postgresql://u@127.0.0.1:{listening.getsockname()[1]}/db", timeout=2.0)


def test_a_server_that_takes_the_connection_and_says_nothing_does_not(listening: socket.socket) -> None:
    # The kernel accepts (backlog); nobody reads: a frozen postmaster.
    with pytest.raises(NoAnswer):
        knock(f"postgresql://u@127.0.0.1:{listening.getsockname()[1]}/db", timeout=0.2)


def test_a_refused_connection_does_not(listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    listening.close()
    with pytest.raises(NoAnswer):
        knock(f"postgresql://u@127.0.0.1:{port}/db", timeout=0.5)


def blocked_reader(conn_end: socket.socket) -> tuple[threading.Thread, list[bytes]]:
    """A call blocked reading a connection whose server says nothing."""
    got: list[bytes] = []
    thread = threading.Thread(target=lambda: got.append(conn_end.recv(1)), daemon=True)
    thread.start()
    return thread, got


def test_a_connection_held_past_its_deadline_by_a_silent_server_is_shut() -> None:
    client, server = socket.socketpair()
    watchdog = Watchdog(0.05, answers=lambda: False)
    conn = SimpleNamespace(pgconn=SimpleNamespace(socket=client.fileno()))
    with watchdog.guarding(conn):
        reader, got = blocked_reader(client)
        reader.join(timeout=10)
        assert not reader.is_alive() and got == [b""]  # released: the socket was shut
    assert watchdog.severed == 1
    client.close()
    server.close()


def test_a_slow_server_that_still_answers_keeps_its_connection() -> None:
    client, server = socket.socketpair()
    asked = threading.Event()

    def answers() -> bool:
        asked.set()
        return True

    watchdog = Watchdog(0.01, answers=answers)
    conn = SimpleNamespace(pgconn=SimpleNamespace(socket=client.fileno()))
    with watchdog.guarding(conn):
        reader, got = blocked_reader(client)
        assert asked.wait(10)  # past the deadline, it asked
        server.sendall(b"x")  # and the slow statement's answer still comes
        reader.join(timeout=10)
    assert got == [b"x"] and watchdog.severed == 0
    client.close()
    server.close()


def test_a_look_that_fails_does_not_end_the_watching() -> None:
    client, server = socket.socketpair()
    asked: list[int] = []

    def answers() -> bool:
        asked.append(1)
        if len(asked) == 1:
            raise RuntimeError("a bug in a probe")
        return False

    watchdog = Watchdog(0.01, answers=answers)
    conn = SimpleNamespace(pgconn=SimpleNamespace(socket=client.fileno()))
    with watchdog.guarding(conn):
        reader, got = blocked_reader(client)
        reader.join(timeout=10)
    assert got == [b""] and watchdog.severed == 1 and len(asked) >= 2
    client.close()
    server.close()
