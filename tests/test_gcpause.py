"""Cyclic collection is paused only for large changes, and resumed when the last one ends."""

from __future__ import annotations

import gc
import threading

import pytest

from lucid_hub import gcpause


def test_a_large_change_pauses_collection_until_the_last_one_ends() -> None:
    assert gc.isenabled()
    first_in, release = threading.Event(), threading.Event()

    def other() -> None:
        with gcpause.paused_for(gcpause.LARGE_CHANGE):
            first_in.set()
            release.wait(30)

    thread = threading.Thread(target=other)
    thread.start()
    assert first_in.wait(30)
    assert not gc.isenabled()
    with gcpause.paused_for(gcpause.LARGE_CHANGE * 2):
        release.set()
        thread.join(30)
        assert not gc.isenabled()  # the other ended, this one still holds the pause
    assert gc.isenabled()


def test_a_small_change_never_pauses_and_a_failure_resumes() -> None:
    with gcpause.paused_for(gcpause.LARGE_CHANGE - 1):
        assert gc.isenabled()
    with pytest.raises(RuntimeError), gcpause.paused_for(gcpause.LARGE_CHANGE):
        assert not gc.isenabled()
        raise RuntimeError("publish failed")
    assert gc.isenabled()


def test_collection_disabled_by_the_operator_stays_disabled() -> None:
    gc.disable()
    try:
        with gcpause.paused_for(gcpause.LARGE_CHANGE):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_large_document_or_received_patch_pauses_collection_while_it_is_read(
        canonicalizer: object) -> None:
    from pathlib import Path
    from tempfile import TemporaryDirectory

    from lucid_hub.rdf.canon import Canonicalizer
    from lucid_hub.signing import KeyRing, TrustedKeys, sign_patch, verify_patch_bytes

    assert isinstance(canonicalizer, Canonicalizer)
    with gcpause.paused_for_bytes(gcpause.LARGE_CHANGE * gcpause.BYTES_PER_ROW - 1):
        assert gc.isenabled()
    with gcpause.paused_for_bytes(gcpause.LARGE_CHANGE * gcpause.BYTES_PER_ROW):
        assert not gc.isenabled()
    # A received patch of 2 MB or more is verified with collection paused (observed from inside).
    import pyoxigraph as ox

    from lucid_hub.diff.local import diff_graph
    from lucid_hub.rdf.rdfpatch import write_rdf_patch

    seen: list[bool] = []  # whether collection ran while the patch was parsed
    text = "".join(f'<http://ex/s{i}> <http://ex/p> "a value long enough to count, number {i}" .\n'
                   for i in range(30_000))
    with TemporaryDirectory() as tmp:
        key = KeyRing(Path(tmp)).ensure()
        trusted = TrustedKeys(KeyRing(Path(tmp)).jwks())
        change = diff_graph([], list(ox.parse(text, format=ox.RdfFormat.N_TRIPLES)), "http://ex/g", canonicalizer)
        raw = write_rdf_patch(sign_patch(change.to_patch(None, held=lambda _d: ()), key))
        assert len(raw) >= gcpause.LARGE_CHANGE * gcpause.BYTES_PER_ROW
        import lucid_hub.rdf.rdfpatch as rdfpatch

        real = rdfpatch._read_canonical  # (the one-pass reader of a canonical format 2 patch)

        def spying(parts: rdfpatch.WireParts, canon: Canonicalizer) -> object:
            seen.append(gc.isenabled())
            return real(parts, canon)

        rdfpatch._read_canonical = spying  # type: ignore[assignment]
        try:
            verified = verify_patch_bytes(raw, trusted, canonicalizer)
        finally:
            rdfpatch._read_canonical = real
    assert seen == [False] and gc.isenabled()
    assert raw.startswith(f"H id <{verified.id}> .".encode())
