"""The controller's worker client: no reuse of a connection that failed, retries on fresh ones."""

from __future__ import annotations

import asyncio
import socket
import struct

import aiohttp
import pytest

from agentrl_jax.controller.worker_http import WorkerHTTP, reached_worker


class ScriptedServer:
    """A raw HTTP/1.1 server on loopback; `answer(path, request_number_on_connection)` says
    what to do: ("ok" | "500-then-reset" | "reset")."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[str] = []

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *_) -> None:
        self.server.close()

    async def _serve(self, reader, writer) -> None:
        self.connections += 1
        number = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                path = head.split(b" ")[1].decode()
                self.requests.append(path)
                number += 1
                action = self.answer(path, number)
                if action == "reset":
                    return _reset(writer)
                status = b"500 Internal Server Error" if action == "500-then-reset" else b"200 OK"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 2\r\n\r\n{}")
                await writer.drain()
                if action == "500-then-reset":
                    # uvicorn after a 500: the connection goes, with no `Connection: close`,
                    # and whatever was sent on it meanwhile meets a reset.
                    await asyncio.sleep(0.3)
                    return _reset(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def _reset(writer) -> None:
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
    writer.transport.abort()


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_connection_that_answered_500_is_not_reused():
    async def main():
        server = ScriptedServer(lambda path, n: "500-then-reset" if path == "/fail" else "ok")
        async with server as base:
            http = WorkerHTTP(timeout_s=10, max_connections=8)
            try:
                assert (await http.post(base + "/fail", "{}")).status == 500
                # Sent at once, inside the window where the old connection still looks open.
                assert (await http.post(base + "/next", "{}")).status == 200
            finally:
                await http.close()
        assert server.requests == ["/fail", "/next"]
        assert server.connections == 2

    run(main())


def test_healthy_connections_are_reused():
    async def main():
        server = ScriptedServer(lambda path, n: "ok")
        async with server as base:
            http = WorkerHTTP(timeout_s=10, max_connections=8)
            try:
                for _ in range(5):
                    assert (await http.post(base + "/x", "{}")).status == 200
            finally:
                await http.close()
        assert server.connections == 1

    run(main())


def test_repeatable_call_is_retried_on_a_fresh_connection():
    async def main():
        # Every first request on a connection is reset; a fresh connection's first one too,
        # until the third connection.
        server = ScriptedServer(lambda path, n: "ok" if server.connections >= 3 else "reset")
        async with server as base:
            http = WorkerHTTP(timeout_s=10, max_connections=8, retry_backoff_s=0.01)
            try:
                assert (await http.call("POST", base + "/cancel", "{}")).status == 200
                with pytest.raises(aiohttp.ClientError):   # a single attempt is not retried
                    server.connections = 0
                    await http.post(base + "/interact", "{}")
            finally:
                await http.close()

    run(main())


def test_reached_worker_tells_refused_connections_apart():
    async def main():
        with socket.socket() as sock:   # a port nobody listens on
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        http = WorkerHTTP(timeout_s=5, max_connections=8, retry_attempts=2,
                          retry_backoff_s=0.01)
        try:
            with pytest.raises(aiohttp.ClientError) as refused:
                await http.call("GET", f"http://127.0.0.1:{port}/api/worker_status")
        finally:
            await http.close()
        assert not reached_worker(refused.value)

        server = ScriptedServer(lambda path, n: "reset")
        async with server as base:
            http = WorkerHTTP(timeout_s=5, max_connections=8)
            try:
                with pytest.raises(aiohttp.ClientError) as reset:
                    await http.post(base + "/interact", "{}")
            finally:
                await http.close()
        assert reached_worker(reset.value)

    run(main())
