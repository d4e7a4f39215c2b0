"""What the client commands print when the URL answers, but not as a halfmq broker: a proxy's error
page, an empty error with its own reason phrase, a page where JSON was expected, a redirect, no
answer in time.  A small HTTP server plays each answer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner, Result

from halfmq.cli import app

ANSWERS = {
    "proxy": (502, "Bad Gateway", b"  <html>Bad Gateway</html>\n"),
    "teapot": (418, "I'm a teapot", b""),
    "page": (200, "OK", b"hello"),
    "moved": (301, "Moved Permanently", b"<html>moved</html>"),
}


class _Answers(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        case = self.path.split("/")[1]
        if case == "slow":
            time.sleep(1)
            return
        status, reason, body = ANSWERS[case]
        self.send_response(status, reason)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def topic_list(url: str, *args: str) -> Result:
    result = CliRunner().invoke(app, ["topic", "list", "--broker", url, "--timeout", "0.3", *args])
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.output
    return result


def error(url: str) -> dict[str, object]:
    shape: dict[str, object] = json.loads(topic_list(url, "--json").stderr)["error"]
    return shape


def test_an_error_page_is_http_status_with_its_text(server: str) -> None:
    assert topic_list(f"{server}/proxy").stderr == (
        "error: HTTP_502 (HTTP 502): <html>Bad Gateway</html>\n"
    )
    assert error(f"{server}/proxy") == {
        "code": "HTTP_502",
        "message": "<html>Bad Gateway</html>",
        "detail": {},
    }


def test_an_empty_error_says_its_reason_phrase(server: str) -> None:
    assert error(f"{server}/teapot")["message"] == "I'm a teapot"


@pytest.mark.parametrize(("case", "status"), [("page", 200), ("moved", 301)])
def test_an_answer_that_is_not_json_is_unexpected(server: str, case: str, status: int) -> None:
    url = f"{server}/{case}"
    message = f"the answer from {url} is not a halfmq broker's JSON (HTTP {status})"
    assert topic_list(url).stderr == f"error: {message}\nurl={url}, status={status}\n"
    assert error(url) == {
        "code": "UNEXPECTED_ANSWER",
        "message": message,
        "detail": {"url": url, "status": status},
    }


def test_no_answer_in_time_is_unreachable(server: str) -> None:
    url = f"{server}/slow"
    assert f"cannot reach the broker at {url}: no answer in time" in topic_list(url).stderr
    assert error(url)["code"] == "BROKER_UNREACHABLE"
