"""Auth cost per WebSocket upgrade: cold (full verification) vs cached, and the open's storm.

Per upgrade = ``token_from_request`` on a realistic header set + ``TokenVerifier.verify_sync``.
Variants: ES256 (the default), RS256 and EdDSA cold; ES256 cached (fingerprint LRU hit); and the
seed's way (``jwt.decode`` with the PEM text, re-parsed per call, on the loop). The storm row
runs N distinct cold tokens through the async ``verify`` (the 2-thread pool) while an asyncio
ticker sleeps 1 ms at a time, and reports the longest loop gap: what every other terminal on
the writer waits at worst. Median of ``runs`` (>= 3) with min and max.

    .venv/bin/python -m bench.micro.bench_auth [--quick]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Row, median_min_max, row

__all__ = ["run"]

BENCH = "auth: µs per upgrade"


def _keys(tmp: Path, alg: str) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

    from monotape.platform.auth import ensure_dev_keys

    if alg == "ES256":
        dev = ensure_dev_keys(tmp)
        return dev.private_pem_path, dev.public_pem_path
    key: Any = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if alg == "RS256"
        else ed25519.Ed25519PrivateKey.generate()
    )
    priv, pub = tmp / f"{alg}.pem", tmp / f"{alg}.pub.pem"
    priv.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return priv, pub


def _headers(token: str) -> dict[str, str]:
    return {
        "Host": "127.0.0.1:8765",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
        "User-Agent": "monotape-sdk/0.1",
        "Authorization": f"Bearer {token}",
    }


def _per_upgrade_us(verify: Any, requests: list[dict[str, str]]) -> float:
    from monotape.platform.auth import token_from_request

    started = time.perf_counter()
    for headers in requests:
        verify(token_from_request(headers, ""))
    return (time.perf_counter() - started) / len(requests) * 1e6


def _storm(verifier: Any, tokens: list[str]) -> tuple[float, float]:
    """(max loop gap in ms, cold upgrades per second) for one burst through the pool."""

    async def main() -> tuple[float, float]:
        done = asyncio.Event()
        gap = 0.0

        async def ticker() -> None:
            nonlocal gap
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                gap = max(gap, now - last)
                last = now

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.005)
        started = time.perf_counter()
        await asyncio.gather(*(verifier.verify(t) for t in tokens))
        elapsed = time.perf_counter() - started
        done.set()
        await tick
        return gap * 1e3, len(tokens) / elapsed

    return asyncio.run(main())


def run(quick: bool = False, runs: int = 3) -> list[Row]:
    import jwt
    from cryptography.hazmat.primitives import serialization

    from monotape.platform.auth import TokenVerifier, load_public_pem

    n = 200 if quick else 2000
    runs = max(3, runs)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        results: dict[str, list[float]] = {}
        storm_gap: dict[int, list[float]] = {}
        storm_rate: dict[int, list[float]] = {}
        for alg in ("ES256", "RS256", "EdDSA"):
            priv, pub = _keys(tmp, alg)
            keys = load_public_pem(pub, alg)
            signer = serialization.load_pem_private_key(priv.read_bytes(), None)
            for r in range(runs):
                now = int(time.time())
                tokens = [
                    jwt.encode(  # what mint_token signs, without re-reading the key per token
                        {
                            "sub": f"t{r}.{i}",
                            "aud": "monotape",
                            "iss": "monotape-dev",
                            "iat": now,
                            "exp": now + 3600,
                            "adm": False,
                        },
                        signer,  # type: ignore[arg-type]
                        algorithm=alg,
                    )
                    for i in range(n)
                ]
                requests = [_headers(t) for t in tokens]
                verifier = TokenVerifier(keys, cache_size=2 * n)
                results.setdefault(f"{alg} cold", []).append(
                    _per_upgrade_us(verifier.verify_sync, requests)
                )
                if alg != "ES256":
                    verifier.close()
                    continue
                results.setdefault("ES256 cached", []).append(
                    _per_upgrade_us(verifier.verify_sync, requests)
                )
                pem = pub.read_text()

                def seed(token: str | None, pem: str = pem) -> Any:
                    return jwt.decode(token or "", pem, algorithms=["ES256"], audience="monotape")

                results.setdefault("ES256 seed (PEM per call)", []).append(
                    _per_upgrade_us(seed, requests[: n // 4])
                )
                verifier.close()
                for threads in (1, 2):
                    pooled = TokenVerifier(keys, verify_threads=threads)
                    gap_ms, rate = _storm(pooled, tokens)
                    pooled.close()
                    storm_gap.setdefault(threads, []).append(gap_ms)
                    storm_rate.setdefault(threads, []).append(rate)
        cold = statistics.median(results["ES256 cold"])
        ratios = {
            "ES256 cached": cold / statistics.median(results["ES256 cached"]),
            "ES256 seed (PEM per call)": statistics.median(results["ES256 seed (PEM per call)"])
            / cold,
        }
        notes = {
            "ES256 cold": "default: header + kid + signature + claims",
            "ES256 cached": "sha256 fingerprint + LRU hit (ratio: cold / cached)",
            "ES256 seed (PEM per call)": "the seed: key parsed per call (ratio: seed / cold)",
            "RS256 cold": "2048-bit key",
            "EdDSA cold": "Ed25519",
        }
        for variant, values in results.items():
            med, lo, hi = median_min_max(values)
            ratio = ratios.get(variant)
            rows.append(
                row(BENCH, variant, med, "µs", lo=lo, hi=hi, ratio=ratio, note=notes[variant])
            )
        for threads in sorted(storm_gap):
            med, lo, hi = median_min_max(storm_gap[threads])
            rows.append(
                row(
                    "auth: open storm",
                    f"{n} cold ES256, {threads} thread(s): max loop gap",
                    med,
                    "ms",
                    lo=lo,
                    hi=hi,
                    note="longest 1 ms-ticker gap while the pool verifies",
                )
            )
            med, lo, hi = median_min_max(storm_rate[threads])
            rows.append(
                row(
                    "auth: open storm",
                    f"{n} cold ES256, {threads} thread(s): throughput",
                    med,
                    "upgrades/s",
                    lo=lo,
                    hi=hi,
                    note="distinct tokens, none cached",
                )
            )
    return rows


def main() -> None:
    quick = "--quick" in sys.argv
    for r in run(quick):
        ratio = f"  x{r.ratio:.1f}" if r.ratio else ""
        print(
            f"{r.benchmark:<20} {r.variant:<42} {r.value:>10.1f} {r.unit:<10}"
            f" [{r.min:.1f}..{r.max:.1f}]{ratio}  {r.note}"
        )


if __name__ == "__main__":
    main()
