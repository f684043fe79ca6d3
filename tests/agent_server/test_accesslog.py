"""The request log: one line per request, and no client text that can forge a line."""

from __future__ import annotations

import logging
import socket
import sys

import pytest

from tests.support.server import ServerProcess
from tests.support.wait import wait_for
from web.logs import SafeFormatter, escape

FORGED = "2099-01-01 00:00:00,000 ERROR agent_server.errors: FORGED"


def test_escape_writes_control_characters_as_escapes() -> None:
    assert (
        escape("a\nb\rc\x1b[31md\x00e\x7f\x85\u2028")
        == "a\\nb\\rc\\x1b[31md\\x00e\\x7f\\x85\\u2028"
    )
    assert escape("plain é 中") == "plain é 中"


def test_the_formatter_keeps_a_record_on_one_line() -> None:
    formatter = SafeFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "GET %s", ("/x\n" + FORGED,), None)
    assert formatter.format(record) == "INFO GET /x\\n" + FORGED


def test_a_traceback_keeps_its_lines_but_each_is_indented() -> None:
    formatter = SafeFormatter("%(levelname)s %(message)s")
    try:
        raise ValueError("bad\n" + FORGED + "\x1b[2J")
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    lines = formatter.format(record).splitlines()
    assert lines[0] == "ERROR failed"
    assert all(line.startswith("    ") for line in lines[1:])
    assert "\x1b" not in "".join(lines)


@pytest.mark.parametrize("control", ["%0A", "%0D", "%1B", "%0D%0A", "%E2%80%A8"])
def test_a_path_cannot_forge_a_line_of_the_server_log(server: ServerProcess, control: str) -> None:
    marker = f"forge{control.replace('%', '')}"
    path = f"/api/{marker}{control}{FORGED.replace(' ', '%20')}%1B[2J"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 401")
    log = wait_for(lambda: marker in server.output() and server.output(), what="the access line")
    (line,) = [line for line in log.splitlines() if marker in line]
    assert "agent_server.access" in line and "FORGED" in line and " 401 " in line
    assert not any(line.startswith("2099") for line in log.splitlines())
    assert "\x1b" not in log and "\r" not in log
