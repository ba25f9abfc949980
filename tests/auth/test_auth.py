"""monotape.platform.auth: verification, refusals, the fingerprint cache, off-loop checks,
dev keys, minting and the token command. Time comes from a FakeClock (no sleeps); the one
timing test is relative (loop gap vs verification time), never absolute."""

from __future__ import annotations

import argparse
import asyncio
import base64
import concurrent.futures
import hashlib
import hmac
import io
import json
import logging
import os
import stat
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from monotape import log
from monotape.clock import FakeClock
from monotape.config import AuthConfig, ConfigError
from monotape.platform.auth import (
    REASONS,
    AuthError,
    Claims,
    KeySet,
    TokenVerifier,
    add_token_arguments,
    build_verifier,
    ensure_dev_keys,
    load_jwks,
    load_public_pem,
    mint_token,
    parse_ttl,
    run_token,
    token_from_request,
    www_authenticate,
)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


def _pem_private(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_public(key: PrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _new_key(alg: str) -> PrivateKey:
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if alg == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ed25519.Ed25519PrivateKey.generate()


class Pair:
    """A key pair on disk plus helpers to mint against a FakeClock."""

    def __init__(self, tmp: Path, alg: str, name: str = "k") -> None:
        self.alg = alg
        self.key = _new_key(alg)
        self.private = tmp / f"{name}-{alg}.pem"
        self.public = tmp / f"{name}-{alg}.pub.pem"
        self.private.write_bytes(_pem_private(self.key))
        self.public.write_bytes(_pem_public(self.key))

    def raw(self, payload: dict[str, Any], headers: dict[str, Any] | None = None) -> str:
        return jwt.encode(payload, self.key, algorithm=self.alg, headers=headers)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _now(clock: FakeClock) -> float:
    return clock.wall_ns() / 1e9


@pytest.fixture
def es(tmp_path: Path) -> Pair:
    return Pair(tmp_path, "ES256")


@pytest.fixture
def verifier(es: Pair, clock: FakeClock) -> Iterator[TokenVerifier]:
    v = TokenVerifier(load_public_pem(es.public, "ES256"), clock=clock)
    yield v
    v.close()


def _mint(pair: Pair, clock: FakeClock, **kw: Any) -> str:
    kw.setdefault("sub", "alice")
    kw.setdefault("ttl_s", 900)
    return mint_token(pair.private, alg=pair.alg, now=_now(clock), **kw)


def _claims(clock: FakeClock, **over: Any) -> dict[str, Any]:
    now = int(_now(clock))
    base: dict[str, Any] = {
        "sub": "alice",
        "aud": "monotape",
        "iss": "monotape-dev",
        "iat": now,
        "exp": now + 900,
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict[str, Any], payload: dict[str, Any], sig: bytes = b"") -> str:
    h = _b64(json.dumps(header).encode())
    p = _b64(json.dumps(payload).encode())
    return f"{h}.{p}.{_b64(sig)}"


# -- valid tokens ------------------------------------------------------------------------------
@pytest.mark.parametrize("alg", ["ES256", "RS256", "EdDSA"])
def test_valid_tokens_verify(tmp_path: Path, clock: FakeClock, alg: str) -> None:
    pair = Pair(tmp_path, alg)
    v = TokenVerifier(load_public_pem(pair.public, alg), clock=clock)
    try:
        token = _mint(pair, clock, admin=True)
        claims = v.verify_sync(token)
        assert claims == Claims(
            sub="alice", exp=int(_now(clock)) + 900, admin=True, aud="monotape", iss="monotape-dev"
        )
        assert asyncio.run(v.verify(token)) == claims
    finally:
        v.close()


def test_public_half_of_a_private_pem_is_accepted(es: Pair, clock: FakeClock) -> None:
    v = TokenVerifier(load_public_pem(es.private, "ES256"), clock=clock)
    assert v.verify_sync(_mint(es, clock)).sub == "alice"


def test_admin_from_adm_or_scope(verifier: TokenVerifier, es: Pair, clock: FakeClock) -> None:
    assert not verifier.verify_sync(es.raw(_claims(clock))).admin
    assert verifier.verify_sync(es.raw(_claims(clock, sub="a", adm=True))).admin
    assert not verifier.verify_sync(es.raw(_claims(clock, sub="b", adm="true"))).admin
    assert verifier.verify_sync(es.raw(_claims(clock, sub="c", scope="read admin"))).admin
    assert verifier.verify_sync(es.raw(_claims(clock, sub="d", scp=["admin"]))).admin
    assert not verifier.verify_sync(es.raw(_claims(clock, sub="e", scope="administrator"))).admin


def test_expires_in() -> None:
    claims = Claims(sub="a", exp=1_000)
    assert claims.expires_in(990.5) == 9.5
    assert claims.expires_in(2_000.0) == 0.0


def _jwk(pair: Pair) -> dict[str, Any]:
    assert isinstance(pair.key, ec.EllipticCurvePrivateKey)
    return dict(jwt.algorithms.ECAlgorithm.to_jwk(pair.key.public_key(), as_dict=True))


def test_jwks_picks_key_by_kid(tmp_path: Path, clock: FakeClock) -> None:
    old, new = Pair(tmp_path, "ES256", "old"), Pair(tmp_path, "ES256", "new")
    jwks: dict[str, list[dict[str, Any]]] = {"keys": []}
    for kid, pair in (("2025-q4", old), ("2026-q1", new)):
        jwks["keys"].append({**_jwk(pair), "kid": kid, "alg": "ES256", "use": "sig"})
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks))
    keys = load_jwks(path, "ES256")
    assert keys.kids == ["2025-q4", "2026-q1"]
    v = TokenVerifier(keys, clock=clock)
    assert v.verify_sync(_mint(old, clock, sub="o", kid="2025-q4")).sub == "o"
    assert v.verify_sync(_mint(new, clock, sub="n", kid="2026-q1")).sub == "n"
    with pytest.raises(AuthError) as swapped:  # the right kid with the other key's signature
        v.verify_sync(_mint(old, clock, sub="x", kid="2026-q1"))
    assert swapped.value.reason == "bad signature"
    kids: tuple[str | None, ...] = ("2024-q1", None)  # unknown; absent while two keys could apply
    for missing in kids:
        with pytest.raises(AuthError) as unknown:
            v.verify_sync(_mint(new, clock, sub="y", kid=missing))
        assert unknown.value.reason == "unknown key id"


def test_build_verifier_from_jwks_and_pem(tmp_path: Path, es: Pair, clock: FakeClock) -> None:
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**_jwk(es), "kid": "only"}]}))
    for cfg in (
        AuthConfig(jwks_file=str(tmp_path / "jwks.json")),
        AuthConfig(public_key_file=str(es.public)),
    ):
        v = build_verifier(cfg, tmp_path / "data", clock=clock)
        assert v.verify_sync(_mint(es, clock)).sub == "alice"  # one JWKS key: no kid needed
        v.close()


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (AuthConfig(algorithm="HS256"), "auth.algorithm"),
        (AuthConfig(algorithm="none"), "auth.algorithm"),
        (AuthConfig(algorithm="RS256"), "auth.public_key_file"),  # the dev key is ES256
        (AuthConfig(public_key_file="/nonexistent.pem"), "auth.public_key_file"),
        (AuthConfig(jwks_file="/nonexistent.json"), "auth.jwks_file"),
        (AuthConfig(cache_size=-1), "auth.cache_size"),
        (AuthConfig(verify_threads=0), "auth.verify_threads"),
    ],
)
def test_build_verifier_refuses_bad_config(tmp_path: Path, cfg: AuthConfig, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        build_verifier(cfg, tmp_path)


def test_key_type_must_match_algorithm(tmp_path: Path) -> None:
    rsa_pair = Pair(tmp_path, "RS256")
    with pytest.raises(ConfigError, match="EC secp256r1"):
        build_verifier(AuthConfig(public_key_file=str(rsa_pair.public)), tmp_path)


# -- refusals ----------------------------------------------------------------------------------
def _refusals(es: Pair, tmp_path: Path, clock: FakeClock) -> dict[str, tuple[str, str]]:
    """case -> (token, expected reason)."""
    now = int(_now(clock))
    good = es.raw(_claims(clock))
    head, body, sig = good.split(".")
    other = Pair(tmp_path, "ES256", "other")
    public_pem = es.public.read_bytes()
    hs_header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    hs_input = f"{hs_header}.{body}".encode()
    hs_sig = hmac.new(public_pem, hs_input, hashlib.sha256).digest()
    sig_bytes = bytearray(base64.urlsafe_b64decode(sig + "=="))
    sig_bytes[5] ^= 0x01
    return {
        "empty": ("", "missing token"),
        "garbage": ("not-a-jwt", "malformed token"),
        "garbage three parts": ("aaaa.bbbb.cccc", "malformed token"),
        "non-ascii": ("é" * 10, "malformed token"),
        "tampered signature": (f"{head}.{body}.{_b64(bytes(sig_bytes))}", "bad signature"),
        "wrong key": (other.raw(_claims(clock)), "bad signature"),
        "expired": (es.raw(_claims(clock, exp=now - 6)), "expired"),
        "not yet valid": (es.raw(_claims(clock, nbf=now + 6)), "not yet valid"),
        "wrong audience": (es.raw(_claims(clock, aud="someone-else")), "wrong audience"),
        "no audience": (es.raw(_claims(clock, aud=None)), "wrong audience"),
        "wrong issuer": (es.raw(_claims(clock, iss="evil")), "wrong issuer"),
        "no exp": (es.raw(_claims(clock, exp=None)), "malformed token"),
        "no sub": (es.raw(_claims(clock, sub=None)), "malformed token"),
        "alg none": (
            _unsigned({"alg": "none", "typ": "JWT"}, _claims(clock)),
            "algorithm not allowed",
        ),
        "HS256 with public key": (f"{hs_header}.{body}.{_b64(hs_sig)}", "algorithm not allowed"),
        "oversized": (good + "A" * 8192, "token too large"),
        "exp NaN": (es.raw(_claims(clock, exp=float("nan"))), "invalid exp"),
        "nbf Infinity": (es.raw(_claims(clock, nbf=float("inf"))), "invalid nbf"),
    }


def test_each_refusal_has_its_reason(
    verifier: TokenVerifier, es: Pair, tmp_path: Path, clock: FakeClock
) -> None:
    cases = _refusals(es, tmp_path, clock)
    seen = set()
    for case, (token, reason) in cases.items():
        with pytest.raises(AuthError) as err:
            verifier.verify_sync(token)
        assert err.value.reason == reason, case
        assert str(err.value) == reason
        seen.add(reason)
    # those two: test_jwks_picks_key_by_kid, test_two_authorization_headers_are_refused
    assert seen == set(REASONS) - {"unknown key id", "duplicate Authorization"}
    assert verifier.cache_entries == 0  # refusals are never cached
    assert sum(verifier.refused.values()) == len(cases)


def test_hs256_confusion_refused_even_by_pyjwt_alone(es: Pair, clock: FakeClock) -> None:
    """Belt and braces: with our allow-list pyjwt itself refuses HS256 keyed by the PEM."""
    body = _b64(json.dumps(_claims(clock)).encode())
    head = _b64(json.dumps({"alg": "HS256"}).encode())
    sig = hmac.new(es.public.read_bytes(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    with pytest.raises(jwt.InvalidAlgorithmError):
        jwt.decode(f"{head}.{body}.{_b64(sig)}", es.public.read_bytes(), algorithms=["ES256"])


def test_oversized_refused_before_parsing(verifier: TokenVerifier) -> None:
    with pytest.raises(AuthError) as err:
        verifier.verify_sync("x" * 10_000_000)  # not even base64: no parser saw it
    assert err.value.reason == "token too large"
    assert verifier.cache_misses == 0


def test_leeway_applies_to_exp_and_nbf(es: Pair, clock: FakeClock) -> None:
    now = int(_now(clock))
    v = TokenVerifier(load_public_pem(es.public, "ES256"), clock=clock, leeway_s=5.0)
    assert v.verify_sync(es.raw(_claims(clock, sub="a", exp=now - 4))).sub == "a"
    assert v.verify_sync(es.raw(_claims(clock, sub="b", nbf=now + 4))).sub == "b"
    strict = TokenVerifier(load_public_pem(es.public, "ES256"), clock=clock, leeway_s=0.0)
    with pytest.raises(AuthError, match="expired"):
        strict.verify_sync(es.raw(_claims(clock, sub="c", exp=now)))


def test_no_token_in_exceptions_or_logs(
    verifier: TokenVerifier,
    es: Pair,
    tmp_path: Path,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = io.StringIO()
    log.set_stream(stream)
    caplog.set_level(logging.DEBUG)
    try:
        cases = _refusals(es, tmp_path, clock)
        for token, _ in cases.values():
            for run in (verifier.verify_sync, lambda t: asyncio.run(verifier.verify(t))):
                with pytest.raises(AuthError) as err:
                    run(token)
                text = "".join(traceback.format_exception(err.value)) + repr(err.value)
                for part in token.split("."):
                    if len(part) >= 8:
                        assert part not in text
        for part in (p for t, _ in cases.values() for p in t.split(".") if len(p) >= 8):
            assert part not in caplog.text
            assert part not in stream.getvalue()
    finally:
        log.set_stream(__import__("sys").stderr)


# -- the cache ---------------------------------------------------------------------------------
def test_repeat_is_a_cache_hit(verifier: TokenVerifier, es: Pair, clock: FakeClock) -> None:
    token = _mint(es, clock)
    first = verifier.verify_sync(token)
    assert (verifier.cache_hits, verifier.cache_misses) == (0, 1)
    assert verifier.verify_sync(token) is first
    assert asyncio.run(verifier.verify(token)) is first
    assert (verifier.cache_hits, verifier.cache_misses) == (2, 1)
    assert verifier.verify_seconds_total > 0
    assert token.encode() not in verifier._cache  # keyed by fingerprint, never the token


def test_cache_never_serves_an_expired_token(es: Pair, clock: FakeClock) -> None:
    v = TokenVerifier(load_public_pem(es.public, "ES256"), clock=clock, leeway_s=5.0)
    token = _mint(es, clock, ttl_s=60)
    v.verify_sync(token)
    clock.advance(64 * 10**9)  # exp + 4 s: inside the leeway, still served from the cache
    assert v.verify_sync(token).sub == "alice"
    assert v.cache_hits == 1
    clock.advance(1 * 10**9)  # exp + leeway: the instant a full verification refuses
    with pytest.raises(AuthError) as err:
        v.verify_sync(token)
    assert err.value.reason == "expired"
    assert v.cache_entries == 0 and v.cache_hits == 1
    with pytest.raises(AuthError, match="expired"):  # and the full path agrees
        v.verify_sync(token)
    assert v.refused["expired"] == 2


def test_lru_bound_holds_and_evictions_count(es: Pair, clock: FakeClock) -> None:
    v = TokenVerifier(load_public_pem(es.public, "ES256"), clock=clock, cache_size=3)
    tokens = [_mint(es, clock, sub=f"u{i}") for i in range(6)]
    for t in tokens[:3]:
        v.verify_sync(t)
    v.verify_sync(tokens[0])  # touch: u0 becomes most recent, u1 is now the oldest
    for t in tokens[3:]:
        v.verify_sync(t)
    assert v.cache_entries == 3 and v.evictions == 3
    hits = v.cache_hits
    v.verify_sync(tokens[5])
    assert v.cache_hits == hits + 1
    v.verify_sync(tokens[1])  # evicted: verified again
    assert v.cache_misses == 7


def test_cache_size_zero_disables_memoization(es: Pair, clock: FakeClock) -> None:
    v = TokenVerifier(load_public_pem(es.public, "ES256"), clock=clock, cache_size=0)
    token = _mint(es, clock)
    v.verify_sync(token)
    v.verify_sync(token)
    assert (v.cache_hits, v.cache_misses, v.cache_entries) == (0, 2, 0)


# -- off the loop ------------------------------------------------------------------------------
async def test_concurrent_same_token_shares_one_check(
    verifier: TokenVerifier, es: Pair, clock: FakeClock
) -> None:
    token = _mint(es, clock)
    results = await asyncio.gather(*(verifier.verify(token) for _ in range(20)))
    assert len({r.sub for r in results}) == 1
    assert verifier.cache_misses == 1 and verifier.coalesced == 19
    assert not verifier._inflight


async def test_cancelled_waiter_does_not_cancel_the_check(
    verifier: TokenVerifier, es: Pair, clock: FakeClock
) -> None:
    token = _mint(es, clock)
    first = asyncio.ensure_future(verifier.verify(token))
    second = asyncio.ensure_future(verifier.verify(token))
    await asyncio.sleep(0)
    first.cancel()
    assert (await second).sub == "alice"
    assert verifier.cache_entries == 1


async def test_async_refusal_is_counted_per_caller(verifier: TokenVerifier) -> None:
    for _ in range(2):
        with pytest.raises(AuthError, match="malformed token"):
            await verifier.verify("aaaa.bbbb.cccc")
    assert verifier.refused["malformed token"] == 2


async def test_cold_storm_does_not_block_the_loop(
    verifier: TokenVerifier, es: Pair, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 concurrent cold verifications run on the pool's threads, never on the loop's.
    Checked by which thread decoded each token, not by gaps in the loop's ticking: under load
    the scheduler alone can pause the whole process longer than the verifications take."""
    tokens = [_mint(es, clock, sub=f"t{i}") for i in range(200)]
    loop_thread = threading.get_ident()
    threads: list[int] = []
    decode = verifier._decode

    def spy(token: str) -> Any:
        threads.append(threading.get_ident())
        return decode(token)

    monkeypatch.setattr(verifier, "_decode", spy)
    results = await asyncio.gather(*(verifier.verify(t) for t in tokens))
    assert {r.sub for r in results} == {f"t{i}" for i in range(200)}
    assert verifier.cache_misses == 200
    assert len(threads) == 200 and loop_thread not in threads


# -- dev keys, minting, the token command ------------------------------------------------------
def test_dev_keys_created_once_and_reused(tmp_path: Path) -> None:
    first = ensure_dev_keys(tmp_path)
    assert first.private_pem_path.parent == tmp_path / "keys"
    assert stat.S_IMODE(first.private_pem_path.stat().st_mode) == 0o600
    pem = first.private_pem_path.read_bytes()
    first.public_pem_path.unlink()  # a lost public half is re-derived, never a new pair
    second = ensure_dev_keys(tmp_path)
    assert second == first and second.private_pem_path.read_bytes() == pem
    assert second.public_pem_path.exists()
    assert not [p for p in (tmp_path / "keys").iterdir() if p.name.startswith(".")]
    os.chmod(first.private_pem_path, 0o644)
    ensure_dev_keys(tmp_path)
    assert stat.S_IMODE(first.private_pem_path.stat().st_mode) == 0o600


def test_mint_then_verify_against_the_default(tmp_path: Path, clock: FakeClock) -> None:
    v = build_verifier(AuthConfig(), tmp_path, clock=clock)  # creates the dev pair
    keys = ensure_dev_keys(tmp_path)
    token = mint_token(keys.private_pem_path, sub="bob", ttl_s=60, admin=True, now=_now(clock))
    claims = v.verify_sync(token)
    assert (claims.sub, claims.admin, claims.expires_in(_now(clock))) == ("bob", True, 60.0)
    v.close()


def _token_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="monotape token")
    add_token_arguments(parser)
    return parser.parse_args(list(argv))


def test_token_command_prints_only_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_token(_token_args("--sub", "alice", "--ttl", "8h", "--admin"), str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.count(".") == 2
    v = build_verifier(AuthConfig(), tmp_path)  # the `monotape run` beside it
    claims = v.verify_sync(out.strip())
    assert claims.admin and claims.sub == "alice"
    assert 8 * 3600 - 60 < claims.expires_in(time.time()) <= 8 * 3600
    v.close()


def test_token_command_uses_configured_audience(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    auth = AuthConfig(audience="desk-a", issuer="sso")
    assert run_token(_token_args("--sub", "a"), str(tmp_path), auth) == 0
    claims = build_verifier(auth, tmp_path).verify_sync(capsys.readouterr().out.strip())
    assert (claims.aud, claims.iss) == ("desk-a", "sso")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("--sub", "a", "--ttl", "15x"), "--ttl"),
        (("--sub", "a", "--ttl", "0s"), "--ttl"),
        (("--sub", "a", "--ttl", "400d"), "--ttl"),
        (("--sub", ""), "--sub"),
        (("--sub", "a", "--alg", "HS256"), "--alg"),
        (("--sub", "a", "--alg", "RS256"), "--key"),
        (("--sub", "a", "--key", "/nonexistent.pem"), "--key"),
    ],
)
def test_token_command_bad_values_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], flag: str
) -> None:
    assert run_token(_token_args(*argv), str(tmp_path)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert flag in captured.err


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("8h", 28_800), ("1d", 86_400), ("45", 45)]
)
def test_parse_ttl(text: str, seconds: int) -> None:
    assert parse_ttl(text) == seconds


# -- the request ---------------------------------------------------------------------------------
def test_token_from_request() -> None:
    assert token_from_request({"authorization": "Bearer abc"}, "") == "abc"
    assert token_from_request({"AUTHORIZATION": "bearer  abc "}, "") == "abc"
    assert token_from_request({"Authorization": "Bearer h"}, "token=q") == "h"  # header first
    assert token_from_request({"Authorization": "Basic Zm9vOmJhcg=="}, "?token=q") == "q"
    assert token_from_request({}, "?x=1&token=q.r.s") == "q.r.s"
    assert token_from_request({}, "token=") is None
    assert token_from_request({"Authorization": "Bearer"}, "") is None
    assert token_from_request({}, "&".join(f"k{i}=v" for i in range(100))) is None


def test_a_browser_token_rides_in_the_subprotocol_list() -> None:
    """``new WebSocket(url, ["monotape.v2", "bearer." + token])``: after the header, before
    the query parameter (docs/auth.md)."""
    offered = [("Sec-WebSocket-Protocol", "monotape.v2, bearer.a.b.c")]
    assert token_from_request(offered, "") == "a.b.c"
    assert token_from_request(offered, "token=q") == "a.b.c"  # before the query
    assert token_from_request([*offered, ("Authorization", "Bearer h")], "") == "h"  # header first
    two_headers = [
        ("sec-websocket-protocol", "monotape.v2"),
        ("sec-websocket-protocol", "bearer.x"),
    ]
    assert token_from_request(two_headers, "") == "x"
    assert token_from_request([("Sec-WebSocket-Protocol", "monotape.v2, bearer.")], "") is None
    assert token_from_request([("Sec-WebSocket-Protocol", "monotape.v2")], "token=q") == "q"


def test_www_authenticate() -> None:
    assert "error=" not in www_authenticate("missing token")
    assert 'error_description="expired"' in www_authenticate("expired")


def test_keyset_without_default_refuses_kidless() -> None:
    assert KeySet("ES256", {}, None).key_for(None) is None


# -- exp / nbf that are not dates (issue 10, A6) ---------------------------------------------------
@pytest.mark.parametrize(
    ("claim", "value"),
    [
        ("exp", float("nan")),
        ("exp", float("inf")),
        ("exp", float("-inf")),
        ("exp", 1e300),  # never expiring, in effect
        ("exp", 10**20),
        ("exp", -1),
        ("exp", True),
        ("exp", "2030-01-01"),
        ("nbf", float("nan")),
        ("nbf", float("inf")),
        ("nbf", 1e300),
        ("nbf", False),
    ],
)
def test_exp_and_nbf_must_be_finite_dates(
    verifier: TokenVerifier, es: Pair, clock: FakeClock, claim: str, value: Any
) -> None:
    """Before: NaN and Infinity raised ValueError/OverflowError out of the verifier (a 500 on the
    upgrade), 1e300 verified as a token that never expires. Now each is a 401 with its reason,
    off the loop and on it alike."""
    token = es.raw(_claims(clock, **{claim: value}))
    with pytest.raises(AuthError) as err:
        verifier.verify_sync(token)
    assert err.value.reason == f"invalid {claim}"

    async def on_the_loop() -> str:
        with pytest.raises(AuthError) as err:
            await verifier.verify(token)
        return err.value.reason

    assert asyncio.run(on_the_loop()) == f"invalid {claim}"
    assert verifier.refused[f"invalid {claim}"] == 2
    assert verifier.cache_entries == 0


def test_the_last_representable_date_is_still_a_date(
    verifier: TokenVerifier, es: Pair, clock: FakeClock
) -> None:
    claims = verifier.verify_sync(es.raw(_claims(clock, exp=253_402_300_799)))
    assert claims.exp == 253_402_300_799
    with pytest.raises(AuthError, match="invalid exp"):
        verifier.verify_sync(es.raw(_claims(clock, exp=253_402_300_800)))


def test_two_authorization_headers_are_refused() -> None:
    """Before, the last one won (the gate built a dict of the headers): refuse instead."""
    with pytest.raises(AuthError) as err:
        token_from_request(
            [("Authorization", "Bearer a.b.c"), ("authorization", "Bearer x.y.z")], ""
        )
    assert err.value.reason == "duplicate Authorization"
    assert "duplicate Authorization" in REASONS
    # One header, given as pairs, is read as before; other headers may repeat freely.
    pairs = [("Cookie", "a=1"), ("Cookie", "b=2"), ("Authorization", "Bearer a.b.c")]
    assert token_from_request(pairs, "token=q.r.s") == "a.b.c"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "missing token"),
        ("", "missing token"),
        ("x" * 9000, "token too large"),
        ("onlyone", "malformed token"),
        ("two.parts", "malformed token"),
        ("four.parts.are.wrong", "malformed token"),
        ("a.b.c d", "malformed token"),
        ("a+b.c/d.e=", "malformed token"),  # base64, not base64url
        ("é.b.c", "malformed token"),
        (".b.c", "malformed token"),
    ],
)
def test_precheck_refuses_the_cheap_cases_without_the_pool(
    es: Pair, clock: FakeClock, token: str | None, reason: str
) -> None:
    """What the gate refuses before it charges any admission budget: nothing reaches the
    verification threads (an executor that fails the test if used)."""

    class NoPool(concurrent.futures.Executor):
        def submit(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
            raise AssertionError("a cheap refusal used the verification pool")

    v = TokenVerifier(load_public_pem(es.public, "ES256"), clock=clock, executor=NoPool())
    with pytest.raises(AuthError) as err:
        v.precheck(token)
    assert err.value.reason == reason
    assert v.refused[reason] == 1
    assert v.cache_misses == 0


def test_precheck_lets_a_well_formed_token_through(verifier: TokenVerifier, es: Pair) -> None:
    verifier.precheck(es.raw({"sub": "a", "exp": 1}))  # shape only: no signature, no dates
    assert not verifier.refused


def test_verify_takes_what_precheck_established_and_does_not_check_again(
    verifier: TokenVerifier, es: Pair, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate prechecks every upgrade, then verifies it: the length check, the pattern and
    the sha256 run once, and the fingerprint precheck computed is the cache's key."""
    token = _mint(es, clock)
    checked = verifier.precheck(token)
    assert checked.token == token
    assert checked.fingerprint == hashlib.sha256(token.encode()).digest()

    def again(token: str | None) -> object:
        raise AssertionError("verify re-ran the checks precheck had done")

    monkeypatch.setattr(verifier, "_admit", again)
    claims = asyncio.run(verifier.verify(checked))
    assert claims.sub == "alice"
    assert checked.fingerprint in verifier._cache
    assert asyncio.run(verifier.verify(checked)) is claims  # the second one is a hit
    assert (verifier.cache_hits, verifier.cache_misses) == (1, 1)


def test_cached_answers_only_for_a_verified_unexpired_token_and_counts_no_refusal(
    es: Pair, clock: FakeClock
) -> None:
    """What the gate asks for an address over its failure cap: never a thread, never a refusal
    counted (that upgrade is answered 429, not 401), and never a token past exp + leeway."""
    v = TokenVerifier(load_public_pem(es.public, "ES256"), clock=clock, leeway_s=5.0)
    good = _mint(es, clock, ttl_s=60)
    assert v.cached(good) is None, "not verified yet: a miss"
    claims = v.verify_sync(good)
    assert v.cached(good) is claims
    forged = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    for other in (forged, _mint(es, clock, sub="bob"), None, "", "a.b", "x" * 9000):
        assert v.cached(other) is None, other
    clock.advance(65 * 10**9)  # exp + leeway
    assert v.cached(good) is None
    assert not v.refused
    assert v.cache_misses == 1
