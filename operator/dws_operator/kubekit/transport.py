"""HTTP to the API server: one aiohttp session, logged in and kept logged in, and the
API server's refusals as typed errors (`NotFound`, `Conflict`, `Invalid`, `ApiError`),
so no caller compares status codes."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import tempfile
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from dws_operator import rfc3339
from dws_operator.kubekit.login import Login, log_in

__all__ = [
    "ApiError",
    "Busy",
    "Conflict",
    "Connection",
    "Invalid",
    "NotFound",
    "Requests",
    "api_error",
]

log = logging.getLogger(__name__)

#: No call the operator makes (watches are kopf's) takes near this long.
CALL_TIMEOUT_SECONDS = 60.0


class ApiError(Exception):
    """An answer that is not 2xx: its status, reason and the server's message."""

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        self.status = status
        self.reason = reason
        self.body = body
        super().__init__(f"{status} {reason}: {self.message}")

    @property
    def message(self) -> str:
        """The API server's own words (its Status object's message), else the reason."""
        try:
            answer = json.loads(self.body or "{}")
        except ValueError:
            answer = {}
        text = answer.get("message") if isinstance(answer, dict) else None
        return str(text or self.reason or "no message")


class NotFound(ApiError):
    """404: the object (or its kind) is not there."""


class Conflict(ApiError):
    """409: exists already, or changed since it was read."""


class Invalid(ApiError):
    """400 or 422: the server (or an admission webhook) will never accept this object
    (422: it breaks the schema or a rule; 400: it cannot even be decoded as one)."""


class Busy(ApiError):
    """429 or 503: the server cannot answer now (overloaded, or a resource's storage
    still initializing); the same call may succeed later."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: Invalid,
    404: NotFound,
    409: Conflict,
    422: Invalid,
    429: Busy,
    503: Busy,
}


def api_error(status: int, reason: str, body: str = "") -> ApiError:
    return _BY_STATUS.get(status, ApiError)(status, reason, body)


class Requests(Protocol):
    """What a client needs of a connection: `Connection`, or the tests' in-memory API
    server (tests/fakes/kubernetes.py), which answers the same way."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> bytes:
        """The answer's bytes; raises `ApiError` (by kind) for one that is not 2xx."""
        ...

    async def keep_logged_in(self) -> None: ...


class Connection:
    """Requests to one API server with the operator's login; credentials that expire
    (exec plugins, projected tokens) are renewed before they do, and once more when the
    server answers 401."""

    def __init__(self, login: Login, kubeconfig: str | None, connections: int) -> None:
        self.login = login
        self._kubeconfig = kubeconfig
        self._connections = connections
        self._proxy = _proxy_for(login.server)
        self._relogin = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        self._session = self._open(login)
        #: Told the HTTP status of every answer that is an error (the operator's metrics).
        self.on_error: Callable[[int], None] | None = None

    @classmethod
    async def open(cls, kubeconfig: str | None = None, connections: int = 10) -> Connection:
        return cls(await log_in(kubeconfig), kubeconfig, connections)

    def _open(self, login: Login) -> aiohttp.ClientSession:
        context: ssl.SSLContext | bool = _tls(login) if login.server.startswith("https:") else True
        connector = aiohttp.TCPConnector(limit=max(1, self._connections), ssl=context)
        # trust_env would make every request read the proxy settings and ~/.netrc again,
        # in a thread of its own; they are read once, above.
        return aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_SECONDS),
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> bytes:
        """The answer's bytes; raises `ApiError` (by kind) for one that is not 2xx."""
        await self.keep_logged_in()
        data = None if body is None else json.dumps(body).encode()
        for attempt in (1, 2):
            login = self.login
            headers = {"Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = content_type
            if login.token:
                headers["Authorization"] = f"Bearer {login.token}"
            async with self._session.request(
                method,
                login.server + path,
                params=dict(query or {}),
                data=data,
                headers=headers,
                proxy=self._proxy,
            ) as response:
                answer = await response.read()
                if 200 <= response.status <= 299:
                    return answer
                if response.status == 401 and attempt == 1 and await self._renew(login):
                    continue
                if self.on_error is not None:
                    self.on_error(response.status)
                raise api_error(
                    response.status, response.reason or "", answer.decode("utf-8", "replace")
                )
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def keep_logged_in(self) -> None:
        """Log in again if the credentials are about to expire."""
        if self.login.due(rfc3339.now()):
            await self._renew(self.login)

    async def _renew(self, used: Login) -> bool:
        """Log in again unless another request already did; True if the credentials
        changed (a retry may then succeed)."""
        async with self._relogin:
            if self.login is not used:
                return True
            fresh = await log_in(self._kubeconfig)
            changed = fresh.credentials() != used.credentials()
            old = self._session
            if fresh.credentials()[1:] != used.credentials()[1:]:  # TLS: a new session
                self._session = self._open(fresh)
            self.login = fresh  # with its session, before anything else runs
            if self._session is not old:
                # Requests still on the old session finish there; it closes after them.
                closing = asyncio.create_task(_close_later(old))
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            return changed

    async def close(self) -> None:
        for closing in list(self._closing):
            closing.cancel()  # closes its session now
        await asyncio.gather(*self._closing, return_exceptions=True)
        await self._session.close()


async def _close_later(session: aiohttp.ClientSession) -> None:
    try:
        await asyncio.sleep(CALL_TIMEOUT_SECONDS)
    finally:
        await session.close()


def _tls(login: Login) -> ssl.SSLContext:
    # Without a CA of its own, the system's (as for any HTTPS server).
    context = ssl.create_default_context(cadata=login.ca_data.decode() if login.ca_data else None)
    if login.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if login.certificate_data and login.private_key_data:
        # ssl loads a client certificate only from files: written to a private
        # directory, loaded, and gone again before anything else runs.
        with tempfile.TemporaryDirectory(prefix="kube-login-") as private:
            certificate, key = Path(private) / "tls.crt", Path(private) / "tls.key"
            certificate.write_bytes(login.certificate_data)
            key.touch(mode=0o600)
            key.write_bytes(login.private_key_data)
            context.load_cert_chain(certificate, key)
    return context


def _proxy_for(url: str) -> str | None:
    scheme = url.split("://", 1)[0]
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    proxies = urllib.request.getproxies()
    if scheme not in proxies or urllib.request.proxy_bypass(host):
        return None
    return proxies[scheme]
