"""A response's head goes out with its body in one send (entrypoints/gateways/http_guard.py
OneWrite); a head whose body does not follow at once still goes out, in order."""

from __future__ import annotations

import asyncio

from entrypoints.gateways.http_guard import OneWrite


class Socket(asyncio.Transport):
    """The sends a transport was asked for."""

    def __init__(self, extra: dict[str, object] | None = None) -> None:
        super().__init__(extra)
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sent.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def test_the_head_and_the_body_go_out_in_one_send() -> None:
    socket = Socket()
    cycle = OneWrite(socket, asyncio.get_running_loop())
    cycle.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n")
    assert socket.sent == []
    cycle.write(b"{}")
    assert socket.sent == [b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}"]
    await asyncio.sleep(0)  # (the loop's next turn: nothing more to send)
    assert len(socket.sent) == 1


async def test_a_head_whose_body_waits_goes_out_on_the_next_turn_and_later_parts_follow_it() -> None:
    socket = Socket()
    cycle = OneWrite(socket, asyncio.get_running_loop())
    cycle.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    await asyncio.sleep(0)
    assert socket.sent == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]
    cycle.write(b"5\r\nfirst\r\n")
    cycle.write(b"0\r\n\r\n")
    assert socket.sent[1:] == [b"5\r\nfirst\r\n", b"0\r\n\r\n"]


async def test_closing_sends_a_held_head_first() -> None:
    socket = Socket()
    cycle = OneWrite(socket, asyncio.get_running_loop())
    cycle.write(b"HTTP/1.1 500 Internal Server Error\r\nconnection: close\r\n\r\n")
    cycle.close()
    assert socket.sent == [b"HTTP/1.1 500 Internal Server Error\r\nconnection: close\r\n\r\n"] and socket.closed
    await asyncio.sleep(0)
    assert len(socket.sent) == 1 and cycle.is_closing()


async def test_what_else_the_cycle_asks_of_its_transport_the_socket_answers() -> None:
    socket = Socket(extra={"peername": ("127.0.0.1", 50000)})
    cycle = OneWrite(socket, asyncio.get_running_loop())
    assert cycle.get_extra_info("peername") == ("127.0.0.1", 50000)
