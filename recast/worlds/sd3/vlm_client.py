"""An OpenAI-compatible chat-completions client fit for the open internet: the VLM judge's endpoint backend.

`OpenAIChatBackend` posts one user message (text, then the images as base64 PNG data URLs) to
`{base_url}/chat/completions` and returns the reply's text. A remote endpoint can be slow, flaky or hostile, so:

- each attempt has one overall deadline, `timeout`: connect, send, status line, headers and body together. The
  attempt runs in a worker thread; at the deadline its socket is shut down, so a server trickling a byte at a time
  (each read well inside a per-read timeout) cannot hold the judge, and no socket is left blocking;
- redirects are never followed: the API key goes to `base_url`'s host (or the configured proxy) only, and a 3xx
  is an error naming the status;
- 408, 425, 429, 5xx, connection errors and timeouts are retried `max_retries` times with exponential backoff and
  jitter, or after a numeric Retry-After capped at `max_retry_after`; then `VLMRequestError` (the judge abstains);
- a reply that is no chat completion (HTML, not UTF-8, no choices/message/content, empty, larger than
  `max_reply_bytes`) raises `VLMReplyError`, a `VLMRequestError` (the judge abstains);
- a refusal that every request would get (3xx, 401, 403, 404, 405, 407, a failed certificate check) has
  `fatal=True`: the judge stops rather than abstaining on every pair;
- settings that cannot work are a one-line ValueError naming the setting, raised before any request.

The http_proxy / https_proxy / no_proxy environment variables are honoured as urllib honours them.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import math
import os
import random
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable

__all__ = ["OpenAIChatBackend", "VLMRequestError", "VLMReplyError"]

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 425, 429})  # and every 5xx
FATAL_STATUSES = frozenset({401, 403, 404, 405, 407})  # and every 3xx: the endpoint refuses this client as set up


class VLMRequestError(RuntimeError):
    """A judge request that failed for good (after any retries).

    Attributes:
        status: the last HTTP status, or None (no response: connection error, timeout, malformed reply body).
        fatal: every request would fail alike (redirect, bad key, wrong path or model): stop, don't abstain.
        partial: set by `PairwiseVLMJudge.judge` when it stops on a fatal error: the verdicts judged so far.
    """

    def __init__(self, message: str, *, status: int | None = None, fatal: bool = False):
        super().__init__(message)
        self.status, self.fatal, self.partial = status, fatal, None


class VLMReplyError(VLMRequestError):
    """A 2xx reply that is not a usable chat completion (not retried: the judge abstains on the pair)."""


def _snippet(data: bytes | str, n: int = 120) -> str:
    """The start of a reply for a one-line message; repr escapes line breaks and control characters."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text[:n]) + ("..." if len(text) > n else "")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"OpenAIChatBackend: {message}")


def _number(value, name: str, low: float, *, integer: bool = False, above: bool = False) -> None:
    good = isinstance(value, int) if integer else isinstance(value, (int, float)) and math.isfinite(value)
    good = good and not isinstance(value, bool) and (value > low if above else value >= low)
    _check(good, f"{name} must be {'an integer' if integer else 'a number'} {'>' if above else '>='} {low:g}, "
                 f"got {value!r}")


class OpenAIChatBackend:
    """An OpenAI-compatible chat endpoint, e.g. `vllm serve Qwen/Qwen2.5-VL-7B-Instruct` -> base_url
    "http://localhost:8000/v1". See the module docstring for timeouts, retries and errors.

    Args:
        base_url: the API root (".../v1"), http:// or https://, without credentials, query or fragment;
            "/chat/completions" is appended.
        model: the served model name.
        api_key: sent as a Bearer token (to base_url's host only) when given.
        api_key_env: instead of api_key, the environment variable holding it; unset or empty is a ValueError.
        timeout: seconds for one whole attempt (connect + send + headers + body).
        max_tokens, temperature: generation settings (greedy by default: a judge should be deterministic).
        max_retries: further attempts after a retryable failure (429, 408, 425, 5xx, connection error, timeout).
        backoff, max_backoff: the k-th retry waits backoff * 2**k seconds, at most max_backoff, times a random
            factor in [0.5, 1] (jitter, so many clients don't retry in lockstep).
        max_retry_after: cap on a server's numeric Retry-After, in seconds (an HTTP-date one is ignored).
        max_reply_bytes: a longer reply body is malformed (bounds memory against a hostile server).
        sleep: waits between attempts (injectable for tests).
        rng: the jitter's random source.

    Raises:
        ValueError: a setting that cannot work (one line, naming it; the key itself is never shown).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 60.0,
                 max_tokens: int = 32, temperature: float = 0.0, api_key_env: str | None = None,
                 max_retries: int = 3, backoff: float = 1.0, max_backoff: float = 30.0,
                 max_retry_after: float = 60.0, max_reply_bytes: int = 1 << 20,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None):
        _check(isinstance(base_url, str) and base_url.isascii() and base_url.isprintable() and " " not in base_url,
               "base_url must be a printable ASCII URL without spaces")
        parts = urllib.parse.urlsplit(base_url)
        _check(parts.scheme in ("http", "https"),
               f"base_url must start with http:// or https://, got scheme {parts.scheme or '(none)'!r}")
        _check("@" not in parts.netloc, "base_url must not carry credentials (user:password@); pass api_key")
        _check(bool(parts.hostname), "base_url has no host")
        _check(not parts.query and not parts.fragment, "base_url must not have a query or fragment")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ValueError(f"OpenAIChatBackend: base_url has a bad port: {parts.netloc!r}") from None
        _check(isinstance(model, str) and bool(model.strip()), "model must be a non-empty string")
        _number(timeout, "timeout", 0, above=True)
        _number(max_tokens, "max_tokens", 1, integer=True)
        _number(temperature, "temperature", 0)
        _number(max_retries, "max_retries", 0, integer=True)
        _number(backoff, "backoff", 0)
        _number(max_backoff, "max_backoff", 0)
        _number(max_retry_after, "max_retry_after", 0)
        _number(max_reply_bytes, "max_reply_bytes", 1, integer=True)
        if api_key_env is not None:
            _check(api_key is None, "give api_key or api_key_env, not both")
            api_key = os.environ.get(api_key_env, "").strip()
            _check(bool(api_key), f"api_key_env: the environment variable {api_key_env!r} is unset or empty")
        _check(api_key is None or isinstance(api_key, str) and (api_key == "" or api_key.isascii() and
               api_key.isprintable() and " " not in api_key),
               "api_key must be printable ASCII without spaces or line breaks (it goes in an HTTP header)")
        self.url = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}/chat/completions"
        self.model, self.api_key, self.timeout = model, api_key, float(timeout)
        self.max_tokens, self.temperature = max_tokens, temperature
        self.max_retries, self.backoff, self.max_backoff = max_retries, backoff, max_backoff
        self.max_retry_after, self.max_reply_bytes = max_retry_after, max_reply_bytes
        self.sleep, self.rng = sleep, rng or random.Random()
        self._https, self._host, self._port = parts.scheme == "https", parts.hostname, port
        self._path = f"{parts.path.rstrip('/')}/chat/completions"
        self._proxy = _proxy_for(parts.scheme, parts.hostname)
        if api_key and not self._https and not self._proxy and parts.hostname not in ("localhost", "127.0.0.1", "::1"):
            log.warning("OpenAIChatBackend: the API key goes unencrypted over http:// to %s", parts.hostname)

    def __call__(self, text: str, images: list[bytes]) -> str:
        """The reply text for one user message of `text` and `images` (PNG bytes).

        Raises:
            VLMRequestError: no usable reply after the retries (`fatal` when no request could succeed).
            VLMReplyError: the reply is not a chat completion with text content.
        """
        content = [{"type": "text", "text": text}] + [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(im).decode()}}
            for im in images]
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": content}],
                           "max_tokens": self.max_tokens, "temperature": self.temperature}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "recast-vlm-judge"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        for attempt in range(self.max_retries + 1):
            wait = status = None
            try:
                status, reply_headers, data = self._attempt(body, headers)
            except ssl.SSLCertVerificationError as e:
                raise VLMRequestError(f"{self.url}: TLS certificate check failed: {e}", fatal=True) from e
            except (OSError, http.client.HTTPException) as e:  # refused, reset, dropped, DNS, timeout (an OSError)
                failure = f"{type(e).__name__}: {e}"
            else:
                if 200 <= status < 300:
                    return _content(data, self.url)
                failure = f"HTTP {status} {_snippet(data)}"
                if 300 <= status < 400:
                    raise VLMRequestError(
                        f"{self.url}: HTTP {status} redirect to {_snippet(reply_headers.get('location', ''))} not "
                        "followed (the API key is only sent to base_url); set base_url to the final endpoint",
                        status=status, fatal=True)
                if status not in RETRY_STATUSES and not 500 <= status < 600:
                    raise VLMRequestError(f"{self.url}: {failure}", status=status, fatal=status in FATAL_STATUSES)
                wait = _retry_after(reply_headers.get("retry-after"))
            if attempt == self.max_retries:
                raise VLMRequestError(f"{self.url}: {failure}; gave up after {attempt + 1} attempt(s)", status=status)
            delay = min(wait, self.max_retry_after) if wait is not None else min(
                self.max_backoff, self.backoff * 2 ** attempt) * (0.5 + 0.5 * self.rng.random())
            log.info("VLM judge request failed (%s); retry %d of %d in %.2f s", failure, attempt + 1,
                     self.max_retries, delay)
            self.sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _connection(self) -> tuple[http.client.HTTPConnection, str]:
        """A fresh (unconnected) connection and the request target: the path, or the whole URL via an http proxy."""
        if self._proxy is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            return cls(self._host, self._port, timeout=self.timeout), self._path
        host, port, auth = self._proxy
        if self._https:  # CONNECT tunnel: TLS runs end to end, the proxy sees no header
            conn = http.client.HTTPSConnection(host, port, timeout=self.timeout)
            conn.set_tunnel(self._host, self._port, headers={"Proxy-Authorization": auth} if auth else None)
            return conn, self._path
        return http.client.HTTPConnection(host, port, timeout=self.timeout), self.url

    def _attempt(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        """One request under one overall deadline: (status, lower-cased headers, body).

        A per-socket timeout only bounds each read, so the request runs in a worker thread that the caller waits for
        at most `timeout`; past it the socket is shut down, which wakes the worker's blocked read or write.
        """
        deadline = time.monotonic() + self.timeout
        conn, target = self._connection()
        if self._proxy and self._proxy[2] and not self._https:
            headers = {**headers, "Proxy-Authorization": self._proxy[2]}
        done = {}

        def work():
            try:
                conn.request("POST", target, body=body, headers=headers)
                response = conn.getresponse()
                reply_headers = {k.lower(): v for k, v in response.getheaders()}
                done["reply"] = response.status, reply_headers, self._read(response, deadline)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread, which re-raises it
                done["error"] = e
            finally:
                conn.close()

        worker = threading.Thread(target=work, name="vlm-judge-request", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by the worker
            raise TimeoutError(f"no complete reply within timeout={self.timeout:g} s")
        if "error" in done:
            raise done["error"]
        return done["reply"]

    def _read(self, response: http.client.HTTPResponse, deadline: float) -> bytes:
        """The body, as it arrives, until the deadline or `max_reply_bytes`."""
        chunks, size = [], 0
        while chunk := response.read1(65536):
            size += len(chunk)
            if size > self.max_reply_bytes:
                raise VLMReplyError(f"{self.url}: reply longer than max_reply_bytes={self.max_reply_bytes}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no complete reply within timeout={self.timeout:g} s")
            chunks.append(chunk)
        return b"".join(chunks)


def _content(data: bytes, url: str) -> str:
    """The text of a chat completion's first choice; `VLMReplyError` for anything else."""
    try:
        reply = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise VLMReplyError(f"{url}: reply is not UTF-8: {_snippet(data)}") from None
    except (ValueError, RecursionError):
        raise VLMReplyError(f"{url}: reply is not JSON: {_snippet(data)}") from None
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise VLMReplyError(f"{url}: reply has no choices[0].message.content: {_snippet(data)}") from None
    if isinstance(content, list):  # some servers send content parts: keep the text ones
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    if not isinstance(content, str) or not content.strip():
        raise VLMReplyError(f"{url}: reply has empty content: {_snippet(data)}")
    return content


def _retry_after(value: str | None) -> float | None:
    """Seconds from a numeric Retry-After header; None when absent or an HTTP-date (then the backoff applies)."""
    value = (value or "").strip()
    return float(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None


def _proxy_for(scheme: str, host: str) -> tuple[str, int, str | None] | None:
    """(host, port, Proxy-Authorization or None) of the environment's proxy for this scheme and host, as urllib."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
    _check(parts.scheme == "http" and bool(parts.hostname),
           f"the {scheme}_proxy environment variable must be an http:// proxy URL")
    auth = None
    if parts.username is not None:
        pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode()).decode()
    try:
        port = parts.port or 80
    except ValueError:
        raise ValueError(f"OpenAIChatBackend: the {scheme}_proxy environment variable has a bad port") from None
    return parts.hostname, port, auth
