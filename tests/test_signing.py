"""Ed25519 keys, JWKS, detached JWS over the patch id, rotation, and raw-bytes verification."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from lucid_hub.errors import ConfigError, PatchIntegrityError, PatchSignatureError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import write_rdf_patch
from lucid_hub.signing import (
    KeyRing,
    SigningKey,
    TrustedKeys,
    generate_key,
    jwks_of,
    load_key,
    sign_patch,
    verify_patch_bytes,
)
from tests.vectors.build import KEY_FILE, build


@pytest.fixture(scope="module")
def patch(canonicalizer: Canonicalizer):  # type: ignore[no-untyped-def]
    return build(canonicalizer)[1][2].with_signature(None)


def test_kid_is_the_rfc7638_thumbprint() -> None:
    # RFC 8037 appendix A.3 gives this thumbprint for the appendix A.1 key.
    assert load_key(KEY_FILE).kid == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_signature_is_detached_compact_jws_over_the_id(patch, signing_key: SigningKey) -> None:  # type: ignore[no-untyped-def]
    signed = sign_patch(patch, signing_key)
    header, payload, _ = signed.signature.split(".")
    assert payload == ""
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "Ed25519", "kid": signing_key.kid}
    assert TrustedKeys(jwks_of([signing_key])).verify(signed.id, signed.signature) == signing_key.kid


def test_unknown_key_wrong_id_and_unsigned_are_rejected(patch, signing_key: SigningKey) -> None:  # type: ignore[no-untyped-def]
    signed = sign_patch(patch, signing_key)
    stranger = TrustedKeys(jwks_of([generate_key()]))
    with pytest.raises(PatchSignatureError, match="unknown key"):
        stranger.verify(signed.id, signed.signature)
    trusted = TrustedKeys(jwks_of([signing_key]))
    with pytest.raises(PatchSignatureError, match="invalid signature"):
        trusted.verify("urn:sha256:" + "1" * 64, signed.signature)
    with pytest.raises(PatchSignatureError, match="not signed"):
        trusted.verify(signed.id, None)


def test_non_canonical_base64_in_the_signature_is_rejected(patch, signing_key: SigningKey) -> None:  # type: ignore[no-untyped-def]
    signed = sign_patch(patch, signing_key)
    header, _, sig = signed.signature.split(".")
    # 64 bytes -> 86 chars; the last one carries 4 unused bits. Flip them: same bytes decoded.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    twin = alphabet[alphabet.index(sig[-1]) ^ 1]
    assert base64.urlsafe_b64decode(sig[:-1] + twin + "==") == base64.urlsafe_b64decode(sig + "==")
    with pytest.raises(PatchSignatureError, match="canonical base64url"):
        TrustedKeys(jwks_of([signing_key])).verify(signed.id, f"{header}..{sig[:-1]}{twin}")


def test_extra_header_parameters_and_other_algorithms_are_rejected(patch, signing_key: SigningKey) -> None:  # type: ignore[no-untyped-def]
    from joserfc import jws
    from joserfc.jwk import OctKey

    trusted = TrustedKeys(jwks_of([signing_key]))
    header = {"alg": "Ed25519", "kid": signing_key.kid, "jku": "https://evil.example/jwks"}
    token = jws.serialize_compact(header, patch.id.encode(), signing_key.key, algorithms=["Ed25519"])
    with pytest.raises(PatchSignatureError, match="unsupported parameters"):
        trusted.verify(patch.id, jws.detach_content(token))
    hmac_key = OctKey.generate_key(256)
    forged = jws.serialize_compact({"alg": "HS256", "kid": signing_key.kid}, patch.id.encode(), hmac_key)
    with pytest.raises(PatchSignatureError, match="algorithm must be Ed25519 or EdDSA"):
        trusted.verify(patch.id, jws.detach_content(forged))


def test_eddsa_the_deprecated_name_verifies_without_a_warning(patch, signing_key: SigningKey,  # type: ignore[no-untyped-def]
                                                             tmp_path: Path) -> None:
    """RFC 9864 deprecates "EdDSA" for "Ed25519" (which this hub signs with); signatures of
    other implementations that still say EdDSA verify, and joserfc's warning is not repeated
    on every verification (checked in a fresh interpreter where any warning is an error:
    pytest resets warning filters around each test)."""
    import subprocess
    import sys

    from joserfc import jws

    trusted = TrustedKeys(jwks_of([signing_key]))
    assert json.loads(base64.urlsafe_b64decode(sign_patch(patch, signing_key).signature.split(".")[0] + "=="))[
        "alg"] == "Ed25519"
    token = jws.detach_content(jws.serialize_compact({"alg": "EdDSA", "kid": signing_key.kid}, patch.id.encode(),
                                                     signing_key.key, algorithms=["EdDSA"]))
    assert trusted.verify(patch.id, token) == signing_key.kid
    (tmp_path / "jwks.json").write_text(json.dumps(jwks_of([signing_key])))
    script = ("import json, sys; from lucid_hub.signing import TrustedKeys; "
              f"keys = TrustedKeys(json.load(open({str(tmp_path / 'jwks.json')!r}))); "
              f"print(keys.verify({patch.id!r}, {token!r}))")
    run = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == signing_key.kid, run.stderr[-500:]
    wrong = jws.serialize_compact({"alg": "EdDSA", "kid": signing_key.kid}, b"urn:sha256:" + b"0" * 64,
                                  signing_key.key, algorithms=["EdDSA"])
    with pytest.raises(PatchSignatureError, match="invalid signature"):
        trusted.verify(patch.id, jws.detach_content(wrong))


def test_raw_bytes_are_checked_before_anything_is_parsed(patch, signing_key: SigningKey,  # type: ignore[no-untyped-def]
                                                         canonicalizer: Canonicalizer) -> None:
    trusted = TrustedKeys(jwks_of([signing_key]))
    raw = write_rdf_patch(sign_patch(patch, signing_key))
    assert verify_patch_bytes(raw, trusted, canonicalizer).id == patch.id
    # Garbage that no RDF parser would accept still fails on the hash, not in a parser.
    broken = raw.replace(b"TC .\n", b"TC .\n<<<not rdf at all")
    with pytest.raises(PatchIntegrityError):
        verify_patch_bytes(broken, trusted, canonicalizer)


def test_key_files_load_from_pem_and_jwk(tmp_path: Path, signing_key: SigningKey) -> None:
    (tmp_path / "k.pem").write_bytes(signing_key.pem())
    (tmp_path / "k.jwk").write_text(json.dumps(signing_key.key.as_dict(private=True)))
    assert load_key(tmp_path / "k.pem").kid == signing_key.kid
    assert load_key(tmp_path / "k.jwk").kid == signing_key.kid
    (tmp_path / "bad.pem").write_text("-----BEGIN PRIVATE KEY-----\nnope\n")
    with pytest.raises(ConfigError, match="not an Ed25519 private key"):
        load_key(tmp_path / "bad.pem")
    with pytest.raises(ConfigError, match="cannot read"):
        load_key(tmp_path / "missing.pem")
    (tmp_path / "public.jwk").write_text(json.dumps(signing_key.public_jwk()))
    with pytest.raises(ConfigError):
        load_key(tmp_path / "public.jwk")


def test_rotation_keeps_old_keys_verifying(tmp_path: Path, patch) -> None:  # type: ignore[no-untyped-def]
    ring = KeyRing(tmp_path / "keys")
    old = ring.create()
    old_signed = sign_patch(patch, old)
    new = ring.rotate()
    assert new.kid != old.kid and ring.active().kid == new.kid
    trusted = TrustedKeys.from_file(tmp_path / "keys" / "jwks.json")
    assert set(trusted.kids) == {old.kid, new.kid}
    assert trusted.verify(old_signed.id, old_signed.signature) == old.kid
    assert stat.S_IMODE((tmp_path / "keys" / "signing-key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys" / "retired" / f"{old.kid}.pem").stat().st_mode) == 0o600
    assert "\"d\"" not in (tmp_path / "keys" / "jwks.json").read_text()
    with pytest.raises(ConfigError, match="exists"):
        ring.create()


def test_invalid_jwks_is_a_config_error(tmp_path: Path) -> None:
    for content in ('{"keys": []}', "not json", '{"keys": [{"kty": "OKP", "crv": "Ed25519"}]}'):
        (tmp_path / "jwks.json").write_text(content)
        with pytest.raises(ConfigError):
            TrustedKeys.from_file(tmp_path / "jwks.json")
