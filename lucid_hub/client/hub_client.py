"""Talking to another hub over HTTP: discovery, its keys, (un)subscription requests, archive
pages, the graph at a version, bulk uploads, and notifications to its inboxes. Services
never build another hub's URLs or parse its answers themselves; every failure comes out as a
`RemoteError` (errors.py).

A mirror's client carries a session that keeps every connection to the outbound address
policy (`lucid_hub.outbound`): the URLs it follows (discovery links, archive pages) are the
publisher's to choose.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Full, Queue
from typing import IO, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import requests
import urllib3

from lucid_hub import nesting, resources
from lucid_hub.client.tokens import client_credentials_token
from lucid_hub.errors import (
    InputError,
    LucidError,
    RemoteAnswerError,
    RemoteRefusedError,
    RemoteUnreachableError,
)
from lucid_hub.outbound import answer_limit, explain
from lucid_hub.rdf.metadata import HEADER as METADATA_HEADER
from lucid_hub.rdf.metadata import Metadata, to_json

TIMEOUT = 30.0
# The most a hub's keys (a JWKS) may be: a few keys are a few kilobytes.
JWKS_BYTES = 1024 * 1024
LDP_INBOX = "http://www.w3.org/ns/ldp#inbox"
BULK_TIMEOUT = 3600.0  # a bulk upload or download of a large graph
IDENTITY = {"Accept-Encoding": "identity"}  # answers read within a cap: counted as they arrive


T = TypeVar("T")


class RoundOver(LucidError):
    """A round's budget is spent between two pages: the rest is for the next round."""


class Budget:
    """What one round of work with another hub may spend (docs/mirrors.md, "Isolation"):
    seconds in all, archive pages, and bytes of any one answer. An answer over its bytes, or
    still arriving when the time is up, is the other hub's fault (RemoteAnswerError); a round
    that runs out between pages is not (RoundOver)."""

    def __init__(self, seconds: float, pages: int, answer_bytes: int,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self.deadline = time.monotonic() + seconds
        self.seconds, self.pages, self.answer_bytes = seconds, pages, answer_bytes
        self.stopped = stopped  # the process is stopping: the round ends at the next page or chunk

    @classmethod
    def unbounded(cls) -> Budget:
        """For an operator's command, waited for at a terminal."""
        return cls(BULK_TIMEOUT, 1 << 30, 1 << 40)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def timeout(self) -> tuple[float, float]:
        """requests' (connect, read) time-outs within what is left."""
        left = max(self.left(), 0.001)
        return min(10.0, left), min(TIMEOUT, left)

    def take_page(self) -> None:
        if self.pages <= 0 or self.left() <= 0 or self.stopped():
            raise RoundOver("the round's budget is spent")
        self.pages -= 1

    def read(self, response: requests.Response, what: str) -> bytes:
        """The body of a streamed answer, refused once it passes the bytes, or the time, it
        may take (a page of 100 MB, or one that arrives a byte at a time)."""
        limit = self.answer_bytes
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            response.close()
            raise RemoteAnswerError(f"{what} declares {int(declared):,} bytes, more than the {limit:,} a mirror reads "
                                    "of one answer (LUCID_MIRROR_MAX_ANSWER_BYTES)")
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):  # asked for none: a compressed page could expand past any cap
            response.close()
            raise RemoteAnswerError(f"{what} came {encoding}-encoded, though none was asked for")
        body = bytearray()
        try:
            # read1: what the connection has now, so that a body arriving a byte at a time
            # still meets the clock (read(n) waits for n bytes, each byte resetting the time-out).
            while chunk := response.raw.read1(1 << 16, decode_content=False):
                body += chunk
                if len(body) > limit:
                    raise RemoteAnswerError(f"{what} is longer than the {limit:,} bytes a mirror reads of one "
                                            "answer (LUCID_MIRROR_MAX_ANSWER_BYTES)")
                if self.stopped():
                    raise RoundOver("stopping")
                if self.left() <= 0:
                    raise RemoteAnswerError(f"{what} was still arriving after the round's {self.seconds:g} s "
                                            "(LUCID_MIRROR_ROUND_SECONDS)")
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise RemoteUnreachableError(f"{what} broke off: {type(exc).__name__}") from None
        finally:
            response.close()
        return bytes(body)


def prefetched(items: Iterator[T], ahead: int = 2) -> Iterator[T]:
    """`items`, produced up to `ahead` in advance by a thread of their own (pages of a remote
    archive are fetched while the ones before are applied). What the producer raises is
    raised here, in order; leaving the loop early stops it."""
    queue: Queue[tuple[bool, Any]] = Queue(maxsize=ahead)
    stopped = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stopped.is_set():
                    try:
                        queue.put((True, item), timeout=0.1)
                        break
                    except Full:
                        continue
                if stopped.is_set():
                    return
            outcome: tuple[bool, Any] = (False, None)
        except BaseException as exc:  # handed to the consumer, which raises it
            outcome = (False, exc)
        while not stopped.is_set():
            try:
                queue.put(outcome, timeout=0.1)
                return
            except Full:
                continue

    thread = threading.Thread(target=produce, name="lucid-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            more, value = queue.get()
            if not more:
                if value is not None:
                    raise value
                return
            yield value
    finally:
        stopped.set()  # the producer ends after the item in hand (not waited for: it may be a request)


def same_origin(url: str, base: str) -> bool:
    """Whether `url` is on the scheme, host and port of `base` (a hub's URL)."""
    a, b = urlsplit(url), urlsplit(base)
    try:
        return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)
    except ValueError:
        return False


def discover(url: str, http: requests.Session, token: str | None = None) -> tuple[str, str]:
    """(hub URL, graph IRI) from a graph's URL by its `Link` headers (WebSub discovery)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = http.head(url, timeout=TIMEOUT, allow_redirects=True, headers=headers)
        if response.status_code == 405:
            response = http.get(url, timeout=TIMEOUT, allow_redirects=True, headers=headers)
    except requests.RequestException as exc:
        raise RemoteUnreachableError(f"cannot reach {url}: {explain(exc)}") from None
    links = response.links
    if "hub" not in links:
        raise RemoteAnswerError(f"{url} names no WebSub hub (no Link rel=\"hub\"; status {response.status_code})")
    self_url = links.get("self", {}).get("url", url)
    graph = parse_qs(urlsplit(self_url).query).get("graph", [self_url])[0]
    return links["hub"]["url"], graph


def fetch_jwks(source: str, http: requests.Session) -> str:
    """The text of a JWKS at a URL or in a file, or given itself (a JSON object); InputError
    when it cannot be had: the operator named it."""
    if source.lstrip().startswith("{"):
        return source
    if source.startswith(("http://", "https://")):
        try:
            with answer_limit(JWKS_BYTES):
                response = http.get(source, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise InputError(f"cannot fetch the publisher's keys from {source}: {explain(exc)}") from None
        if response.status_code != 200:
            raise InputError(f"cannot fetch the publisher's keys from {source}: HTTP {response.status_code}")
        return response.text
    try:
        return Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the publisher's keys from {source}: {exc.strerror}") from None


class HubClient:
    """Another hub at `base` (its public URL), as one client of it."""

    def __init__(self, base: str, http: requests.Session | None = None, token: str | None = None) -> None:
        self.base = base.rstrip("/")
        self.http: Any = http or requests
        self.token = token

    def authorize(self, client_id: str, secret: str, scope: str | None = None) -> str:
        """Take a token by client credentials; later requests carry it."""
        self.token = client_credentials_token(self.base, client_id, secret, scope, http=self.http)
        return self.token

    def _headers(self, **extra: str) -> dict[str, str]:
        return {**({"Authorization": f"Bearer {self.token}"} if self.token else {}), **extra}

    def _call(self, method: str, url: str, where: str, **kwargs: Any) -> requests.Response:
        """One HTTP request; RemoteUnreachableError naming `where` when it gets no answer."""
        try:
            response: requests.Response = getattr(self.http, method)(url, **kwargs)
            return response
        except requests.RequestException as exc:
            raise RemoteUnreachableError(f"cannot reach {where}: {explain(exc)}") from None

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """A call to the hub's API at `path`: its JSON (None when it has no body); the hub's
        reason, on one line, as a RemoteRefusedError for a 4xx or 5xx."""
        headers = self._headers(**kwargs.pop("headers", {}))
        answer = self._call(method.lower(), self.base + path, f"the hub at {self.base}", timeout=60,
                            headers=headers, **kwargs)
        if answer.status_code >= 400:
            try:
                detail = answer.json().get("detail") or answer.text
            except ValueError:
                detail = answer.text
            reason = " ".join(str(detail).split())[:500]
            raise RemoteRefusedError(f"{self.base} answered {answer.status_code}: {reason}", answer.status_code)
        return answer.json() if answer.content else None

    # --- WebSub ------------------------------------------------------------------------
    def hub_request(self, hub_url: str, form: dict[str, str]) -> None:
        """A WebSub (un)subscription request; the hub must accept it (202)."""
        answer = self._call("post", hub_url, f"the hub {hub_url}", data=form, timeout=TIMEOUT,
                            headers=self._headers())
        if answer.status_code != 202:
            raise RemoteRefusedError(f"the hub refused to {form.get('hub.mode')} ({answer.status_code}): "
                                     f"{answer.text.strip()[:300]}", answer.status_code)

    # --- Linked Data Notifications -------------------------------------------------------
    def inbox_of(self, graph: str) -> str | None:
        """The graph's LDN inbox, by the `Link rel=ldp#inbox` on its resource (LDN §3, HEAD
        first); None when the hub names none (a release before inboxes). An inbox on another
        origin is not followed: notifications carry the client's token."""
        url = resources.graph_url(self.base, graph)
        answer = self._call("head", url, f"the graph {url}", timeout=TIMEOUT, headers=self._headers())
        inbox = answer.links.get(LDP_INBOX, {}).get("url")
        if inbox is None or not same_origin(inbox, self.base):
            return None
        return str(inbox)

    def notify(self, inbox: str, notification: dict[str, Any]) -> str:
        """Post a notification (JSON-LD) to an inbox; its Location. A notification the inbox
        received before counts as sent (409 names the first copy)."""
        answer = self._call("post", inbox, f"the inbox {inbox}", data=json.dumps(notification).encode(),
                            timeout=TIMEOUT, headers=self._headers(**{"Content-Type": "application/ld+json"}))
        if answer.status_code not in (201, 202, 409):
            raise RemoteRefusedError(f"the inbox refused the notification ({answer.status_code}): "
                                     f"{answer.text.strip()[:300]}", answer.status_code)
        return str(answer.headers.get("Location", ""))

    # --- the archive and graphs --------------------------------------------------------
    def archive_pages(self, graph: str, since: str | None, budget: Budget | None = None) -> Iterator[dict[str, Any]]:
        """The pages of the graph's archive after `since` (all for None), following `next`
        links as long as they stay on this hub's origin and lead somewhere new, within
        `budget` (RoundOver before a page it has no room for). A missing `since` is a
        RemoteRefusedError with status 404."""
        budget = budget or Budget.unbounded()
        url: str | None = f"{self.base}/patches"
        params: dict[str, str] | None = {"graph": graph, **({"since": since} if since else {})}
        seen: set[str] = set()
        while url:
            budget.take_page()
            answer = self._call("get", url, f"the publisher {self.base}", params=params, timeout=budget.timeout(),
                                stream=True, headers=self._headers(**IDENTITY, Accept="application/json"))
            if answer.status_code != 200:
                text = budget.read(answer, "the publisher's refusal")[:300].decode("utf-8", "replace")
                raise RemoteRefusedError(f"the publisher's archive answered {answer.status_code}: {text}",
                                         answer.status_code)
            try:
                what = "the publisher's archive page"
                page = nesting.loads(budget.read(answer, what), what)
            except LucidError as exc:
                raise RemoteAnswerError(str(exc)) from None
            if not isinstance(page, dict):
                raise RemoteAnswerError("the publisher's archive page is not a JSON object")
            yield page  # (what it holds is verified patch by patch: applied before its links are judged)
            url, params = page.get("next"), None
            if url is not None and not (isinstance(url, str) and same_origin(url, self.base)):
                raise RemoteAnswerError(f"the publisher's archive page links outside its archive: {str(url)[:200]}")
            if url is not None and (not page.get("patches") or url in seen):
                raise RemoteAnswerError("the publisher's archive pages do not end: a page "
                                        f"{'without patches' if not page.get('patches') else 'seen before'} links to "
                                        f"another ({url[:200]})")
            seen.add(url or "")

    def graph_at(self, graph: str, version: str | None, budget: Budget | None = None) -> bytes:
        """The graph's content at `version` (its current one for None), as N-Triples."""
        budget = budget or Budget.unbounded()
        answer = self._call("get", f"{self.base}/graphs", f"the publisher {self.base}", timeout=budget.timeout(),
                            params={"graph": graph, "version": version or ""}, stream=True,
                            headers=self._headers(**IDENTITY, Accept="application/n-triples"))
        body = budget.read(answer, "the publisher's graph")
        if answer.status_code != 200:
            raise RemoteRefusedError(f"the publisher's graph answered {answer.status_code}: "
                                     f"{body[:300].decode('utf-8', 'replace')}", answer.status_code)
        return body

    def check_graph(self, graph: str) -> None:
        """That the hub has the graph and this client may read it: RemoteRefusedError saying
        which of the two is not so (status 404, or 401/403)."""
        answer = self._call("head", f"{self.base}/graphs", f"the hub {self.base}", params={"graph": graph},
                            timeout=TIMEOUT, headers=self._headers())
        if answer.status_code == 404:
            raise RemoteRefusedError(f"the hub at {self.base} has no graph <{graph}> (is the IRI right?)", 404)
        if answer.status_code in (401, 403):
            raise RemoteRefusedError(f"the hub at {self.base} does not let this client read <{graph}>: it needs "
                                     "an access condition there that grants it", answer.status_code)
        if answer.status_code >= 400:
            raise RemoteRefusedError(f"the hub at {self.base} answered {answer.status_code} for <{graph}>",
                                     answer.status_code)

    def may_read(self, graph: str) -> bool:
        """Whether this client may read the graph now (False only on a 401 or 403)."""
        answer = self._call("head", f"{self.base}/graphs", f"the publisher {self.base}", params={"graph": graph},
                            timeout=TIMEOUT, headers=self._headers())
        return answer.status_code not in (401, 403)

    def download_graph(self, graph: str, path: Path) -> str | None:
        """Write the graph's current content to `path` as N-Triples; its version (None, and an
        empty file, for a graph the hub does not have yet)."""
        try:
            with self.http.get(f"{self.base}/graphs", params={"graph": graph}, stream=True, timeout=BULK_TIMEOUT,
                               headers=self._headers(Accept="application/n-triples")) as current:
                if current.status_code == 404:
                    path.write_bytes(b"")
                    return None
                if current.status_code != 200:
                    raise RemoteRefusedError(f"the hub answered {current.status_code} for <{graph}>: "
                                             f"{current.text[:300]}", current.status_code)
                with path.open("wb") as out:
                    for chunk in current.iter_content(1 << 20):
                        out.write(chunk)
                return current.headers.get("ETag", "").strip('"') or None
        except requests.RequestException as exc:
            raise RemoteUnreachableError(f"cannot reach the hub at {self.base}: {explain(exc)}") from None

    def put_graph(self, graph: str, raw: IO[bytes], size: int, media_type: str, message: str,
                  progress: Callable[[int], None] = lambda _n: None,
                  sent: Callable[[], None] = lambda: None, author: str = "",
                  metadata: Metadata = ()) -> dict[str, Any]:
        """PUT a file as the graph's new content, streamed; the hub's JSON answer. `sent` is
        called when the body is out (the hub then diffs and publishes). `author` names the
        person the client publishes for (the hub records it as the client stated it)."""
        headers = {"Content-Type": media_type, "X-Lucid-Message": message, **({"X-Lucid-Author": author} if author
                                                                              else {}), **_metadata_header(metadata)}
        response = self._call("put", f"{self.base}/graphs", f"the hub at {self.base}", params={"graph": graph},
                              data=_UploadBody(raw, size, progress), timeout=BULK_TIMEOUT,
                              headers=self._headers(**headers))
        sent()
        if response.status_code >= 400:
            raise RemoteRefusedError(f"the hub refused the publish ({response.status_code}): {response.text.strip()}",
                                     response.status_code)
        answer: dict[str, Any] = response.json()
        return answer

    def post_patch(self, graph: str, body: bytes, media_type: str, message: str,
                   metadata: Metadata = ()) -> dict[str, Any]:
        """POST an RDF Patch to the graph's archive; the hub's JSON answer (201)."""
        answer = self._call("post", f"{self.base}/patches", f"the hub at {self.base}", params={"graph": graph},
                            timeout=BULK_TIMEOUT, data=body,
                            headers=self._headers(**{"Content-Type": media_type, "X-Lucid-Message": message,
                                                     **_metadata_header(metadata)}))
        if answer.status_code != 201:
            raise RemoteRefusedError(f"the hub refused the patch ({answer.status_code}): {answer.text.strip()[:300]}",
                                     answer.status_code)
        result: dict[str, Any] = answer.json()
        return result


class _UploadBody:
    """A file streamed by requests (which sends Content-Length from len()), reporting progress."""

    def __init__(self, raw: IO[bytes], size: int, progress: Callable[[int], None]) -> None:
        self._raw, self._size, self._progress = raw, size, progress

    def __len__(self) -> int:
        return self._size

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._progress(len(data))
        return data


def _metadata_header(metadata: Metadata) -> dict[str, str]:
    """The `X-Lucid-Metadata` header for a write's patch metadata (none when there is none)."""
    return {METADATA_HEADER: json.dumps(to_json(metadata))} if metadata else {}
