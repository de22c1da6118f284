"""Publisher keys (Ed25519) and patch signatures: JWS over the patch id, payload detached.

Keys are JWKs whose `kid` is their RFC 7638 thumbprint; the public ones are published as
a JWKS. A key ring keeps retired keys so that patches signed before a rotation verify.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from joserfc import jws
from joserfc.errors import JoseError, SecurityWarning
from joserfc.jwk import OKPKey

from lucid_hub import nesting
from lucid_hub.errors import ConfigError, InputError, PatchSignatureError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import read_canonical, read_rdf_patch, split_wire

# What this hub signs with: RFC 9864's fully-specified identifier. Verification also accepts
# the older "EdDSA" (deprecated by RFC 9864, the same algorithm with these keys), which other
# JOSE implementations and earlier hubs still emit (docs/decisions.md).
ALGORITHM = "Ed25519"
VERIFY_ALGORITHMS = ["Ed25519", "EdDSA"]
# joserfc warns on every EdDSA verification; accepting it is deliberate, said once here.
warnings.filterwarnings("ignore", message="EdDSA is deprecated", category=SecurityWarning)
KEY_FILE = "signing-key.pem"
JWKS_FILE = "jwks.json"
RETIRED_DIR = "retired"


@dataclass(frozen=True)
class SigningKey:
    """A private Ed25519 key; `kid` is its RFC 7638 thumbprint."""

    key: OKPKey

    @cached_property
    def kid(self) -> str:
        return self.key.thumbprint()

    def public_jwk(self) -> dict[str, Any]:
        """The public JWK, with `kid`, `alg` and `use`."""
        jwk = self.key.as_dict(private=False)
        jwk.update(kid=self.kid, alg=ALGORITHM, use="sig")
        return dict(jwk)

    def pem(self) -> bytes:
        """The private key as PKCS#8 PEM."""
        return bytes(self.key.as_pem(private=True))


def generate_key() -> SigningKey:
    """A new random Ed25519 key."""
    return SigningKey(OKPKey.generate_key("Ed25519"))


def load_key(path: str | Path) -> SigningKey:
    """Load a private Ed25519 key from a PEM (PKCS#8) or JWK (JSON) file."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read key file: {exc.strerror or exc}") from None
    try:
        value: Any = json.loads(data) if data.lstrip().startswith(b"{") else data
        key = OKPKey.import_key(value)
    except (ValueError, JoseError, TypeError) as exc:
        raise ConfigError(f"{p}: not an Ed25519 private key (PEM or JWK): {exc}") from None
    if key.curve_name != "Ed25519" or not key.is_private:
        raise ConfigError(f"{p}: not an Ed25519 private key")
    return SigningKey(key)


def sign_patch(patch: Patch, key: SigningKey) -> Patch:
    """The patch with a signature: a compact JWS over its id, payload detached (`h..s`)."""
    token = jws.serialize_compact(
        {"alg": ALGORITHM, "kid": key.kid}, patch.id.encode(), key.key, algorithms=[ALGORITHM]
    )
    return patch.with_signature(str(jws.detach_content(token)))


def sign_text(body: bytes, key: SigningKey) -> str:
    """A detached compact JWS (`h..s`) over `sha256:HEX` of `body`: what a webhook's receiver
    verifies with the hub's JWKS (TrustedKeys.verify with that payload)."""
    payload = "sha256:" + hashlib.sha256(body).hexdigest()
    token = jws.serialize_compact({"alg": ALGORITHM, "kid": key.kid}, payload.encode(), key.key, algorithms=[ALGORITHM])
    return str(jws.detach_content(token))


class TrustedKeys:
    """Public keys a receiver trusts (a publisher's JWKS), for verifying patch signatures."""

    def __init__(self, jwks: dict[str, Any]) -> None:
        keys = []
        try:
            for entry in jwks.get("keys", []):
                if entry.get("kty") != "OKP" or entry.get("crv") != "Ed25519":
                    continue  # other key types may share the JWKS; they never sign patches
                public = {k: entry[k] for k in ("kty", "crv", "x")}
                keys.append(OKPKey.import_key(public))
        except (AttributeError, KeyError, ValueError, JoseError, TypeError) as exc:
            raise ConfigError(f"invalid JWKS: {exc}") from None
        if not keys:
            raise ConfigError("the JWKS holds no Ed25519 key")
        self._keys = {k.thumbprint(): k for k in keys}

    @classmethod
    def from_file(cls, path: str | Path) -> TrustedKeys:
        """Load a JWKS file (`{"keys": [...]}`)."""
        try:
            return cls(json.loads(Path(path).read_bytes()))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read JWKS: {exc.strerror or exc}") from None
        except (ValueError, AttributeError) as exc:
            raise ConfigError(f"{path}: not a JWKS: {exc}") from None

    @property
    def kids(self) -> list[str]:
        return sorted(self._keys)

    def verify(self, patch_id: str, signature: str | None) -> str:
        """Check `signature` over `patch_id`; returns the signing key's kid or raises."""
        if not signature:
            raise PatchSignatureError(f"patch {patch_id} is not signed")
        parts = signature.split(".")
        if len(parts) != 3 or parts[1] != "" or not all(_canonical_b64(p) for p in (parts[0], parts[2])):
            raise PatchSignatureError("signature is not a detached compact JWS in canonical base64url")
        try:
            header = nesting.loads(_b64decode(parts[0]), "signature header")
        except InputError:
            raise PatchSignatureError("signature header is not JSON (or nests too deeply)") from None
        if not isinstance(header, dict) or header.get("alg") not in VERIFY_ALGORITHMS:
            raise PatchSignatureError(f"signature algorithm must be {' or '.join(VERIFY_ALGORITHMS)}")
        if set(header) - {"alg", "kid", "typ"}:
            raise PatchSignatureError("signature header has unsupported parameters")
        key = self._keys.get(str(header.get("kid")))
        if key is None:
            raise PatchSignatureError(f"patch signed with unknown key kid={header.get('kid')!r}")
        try:
            jws.deserialize_compact(signature, key, payload=patch_id.encode(), algorithms=VERIFY_ALGORITHMS)
        except JoseError:
            raise PatchSignatureError(f"invalid signature on patch {patch_id}") from None
        return str(header["kid"])


def _b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _canonical_b64(part: str) -> bool:
    # Unused low bits of the last character would let two encodings decode alike; only the
    # canonical one passes, so no byte of a signed patch can change unnoticed.
    try:
        return base64.urlsafe_b64encode(_b64decode(part)).rstrip(b"=").decode() == part
    except ValueError:
        return False


def verify_patch_bytes(raw: bytes, trusted: TrustedKeys, canonicalizer: Canonicalizer) -> Patch:
    """Verify a received RDF Patch and return it; raises PatchVerificationError otherwise.

    Order matters: the id is checked against the raw bytes and the signature against the
    id before any RDF is parsed; only then is the patch parsed and required to be in
    canonical form (so that one change has exactly one byte form and one id).
    """
    parts = split_wire(raw)
    parts.check_integrity()
    trusted.verify(parts.claimed_id, parts.signature)
    patch = read_canonical(parts, canonicalizer)  # a format 2 patch in canonical form: one pass
    if patch is not None:
        return patch
    patch = read_rdf_patch(raw, canonicalizer)
    if patch.canonical_bytes != parts.preimage:
        raise PatchSignatureError("patch is signed but not in canonical form")
    return patch


def verify_patch(patch: Patch, trusted: TrustedKeys) -> str:
    """Verify a parsed patch's signature over its recomputed id; returns the kid."""
    return trusted.verify(patch.id, patch.signature)


class KeyRing:
    """A directory of publisher keys: the active one and retired ones kept for verification.

    Layout: `signing-key.pem` (active, mode 0600), `retired/<kid>.pem`, and `jwks.json`
    with the public keys of all of them.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    @property
    def active_path(self) -> Path:
        return self.directory / KEY_FILE

    def exists(self) -> bool:
        return self.active_path.is_file()

    def create(self) -> SigningKey:
        """Generate the first key; refuses to overwrite an existing one."""
        if self.exists():
            raise ConfigError(f"{self.active_path} exists; use 'keys rotate' to replace it")
        key = generate_key()
        self.directory.mkdir(parents=True, exist_ok=True)
        write_private(self.active_path, key.pem())
        self.write_jwks()
        return key

    def ensure(self) -> SigningKey:
        """The active key, generated at first start."""
        return self.active() if self.exists() else self.create()

    def active(self) -> SigningKey:
        return load_key(self.active_path)

    def retired(self) -> list[SigningKey]:
        folder = self.directory / RETIRED_DIR
        return [load_key(p) for p in sorted(folder.glob("*.pem"))] if folder.is_dir() else []

    def rotate(self) -> SigningKey:
        """Make a new active key; the old one moves to `retired/` and stays in the JWKS."""
        old = self.active()
        folder = self.directory / RETIRED_DIR
        folder.mkdir(exist_ok=True)
        write_private(folder / f"{old.kid}.pem", old.pem())
        new = generate_key()
        write_private(self.active_path, new.pem())
        self.write_jwks()
        return new

    def jwks(self) -> dict[str, Any]:
        """The public JWKS: the active key first, then the retired ones."""
        return jwks_of([self.active(), *self.retired()])

    def write_jwks(self) -> Path:
        path = self.directory / JWKS_FILE
        path.write_text(json.dumps(self.jwks(), indent=2) + "\n")
        return path


def jwks_of(keys: Iterable[SigningKey]) -> dict[str, Any]:
    """A JWKS document of the keys' public halves."""
    return {"keys": [k.public_jwk() for k in keys]}


def write_private(path: Path, data: bytes) -> None:
    """Write a secret file, created with mode 0600 from the start (never readable by others,
    not even briefly) and moved into place whole."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
