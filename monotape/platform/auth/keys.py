"""Verification keys, built once at start; the embedded default's dev key pair.

A ``KeySet`` holds cryptography key objects, parsed once (the seed re-parsed the PEM on every
upgrade: ~0.9 ms of the event loop each). It comes from a PEM public key file (one key, any
``kid``) or a JWKS file (RFC 7517 §5; the token's ``kid`` picks the key, which makes rotation a
matter of publishing the new key beside the old one).

``ensure_dev_keys`` gives ``monotape run`` and ``monotape token`` one shared ES256 (P-256) pair
under ``<data_dir>/keys/``, created once and reused.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from monotape.log import log_event

__all__ = [
    "ALGORITHMS",
    "DevKeys",
    "KeyFileError",
    "KeySet",
    "PublicKey",
    "ensure_dev_keys",
    "load_jwks",
    "load_public_pem",
]

PublicKey = (
    ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey
)

# Asymmetric only: a symmetric (HS*) algorithm would let anyone holding the *public* key mint
# tokens (RFC 8725 §2.1, §3.1). The curve is pinned by the algorithm (RFC 7518 §3.4).
_CURVES: Final = {"ES256": ec.SECP256R1, "ES384": ec.SECP384R1, "ES512": ec.SECP521R1}
_RSA: Final = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
ALGORITHMS: Final = frozenset({*_CURVES, *_RSA, "EdDSA"})
_MIN_RSA_BITS: Final = 2048  # RFC 7518 §3.3

DEV_PRIVATE: Final = "dev-es256.pem"
DEV_PUBLIC: Final = "dev-es256.pub.pem"


class KeyFileError(ValueError):
    """A key file or JWKS cannot serve the configured algorithm; the message names the file."""


def _check(alg: str, key: object, where: str) -> PublicKey:
    if alg not in ALGORITHMS:
        raise KeyFileError(f"algorithm {alg!r} is not one of {', '.join(sorted(ALGORITHMS))}")
    if alg in _CURVES:
        if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, _CURVES[alg]):
            return key
        raise KeyFileError(f"{where}: {alg} needs an EC {_CURVES[alg].name} public key")
    if alg in _RSA:
        if isinstance(key, rsa.RSAPublicKey) and key.key_size >= _MIN_RSA_BITS:
            return key
        raise KeyFileError(f"{where}: {alg} needs an RSA public key of {_MIN_RSA_BITS}+ bits")
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return key
    raise KeyFileError(f"{where}: EdDSA needs an Ed25519 or Ed448 public key")


class KeySet:
    """The verification keys for one algorithm. ``key_for(kid)`` is a dict lookup, no parsing."""

    def __init__(
        self, algorithm: str, by_kid: dict[str, PublicKey], default: PublicKey | None
    ) -> None:
        self.algorithm = algorithm
        self._by_kid = by_kid
        self._default = default  # used when the token names no kid (or a PEM key: any kid)

    def key_for(self, kid: str | None) -> PublicKey | None:
        if kid is not None and kid in self._by_kid:
            return self._by_kid[kid]
        if kid is not None and self._by_kid:
            return None  # a JWKS that does not hold this kid: "unknown key id"
        return self._default

    @property
    def kids(self) -> list[str]:
        return sorted(self._by_kid)


def load_public_pem(path: str | Path, algorithm: str) -> KeySet:
    """One PEM public key (SubjectPublicKeyInfo), or the public half of a PEM private key."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{path}: {exc.strerror}") from exc
    try:
        key: object = serialization.load_pem_public_key(data)
    except ValueError:
        try:  # accept a private key file too (the dev pair), keep only its public half
            key = serialization.load_pem_private_key(data, password=None).public_key()
        except (ValueError, TypeError):
            raise KeyFileError(f"{path}: not a PEM public key") from None
    return KeySet(algorithm, {}, _check(algorithm, key, str(path)))


def load_jwks(path: str | Path, algorithm: str) -> KeySet:
    """A JWKS file: keys with a ``kid``; those for another ``alg`` or ``use`` are skipped."""
    try:
        doc: Any = json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise KeyFileError(f"{path}: {exc.strerror}") from exc
    except ValueError:
        raise KeyFileError(f"{path}: not JSON") from None
    entries = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise KeyFileError(f"{path}: a JWKS needs a top-level 'keys' list (RFC 7517 §5)")
    by_kid: dict[str, PublicKey] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        if entry.get("alg", algorithm) != algorithm:
            continue
        kid = entry.get("kid")
        if not isinstance(kid, str) or not kid:
            raise KeyFileError(f"{path}: key {i} has no 'kid'")
        if "d" in entry:
            raise KeyFileError(f"{path}: key {kid!r} holds a private part; publish public keys")
        try:
            jwk = jwt.PyJWK(entry, algorithm=algorithm)
        except jwt.PyJWTError as exc:
            raise KeyFileError(f"{path}: key {kid!r}: {exc}") from None
        by_kid[kid] = _check(algorithm, jwk.key, f"{path}: key {kid!r}")
    if not by_kid:
        raise KeyFileError(f"{path}: no signing key for {algorithm}")
    # A token without a kid is accepted only when there is exactly one key to try.
    default = next(iter(by_kid.values())) if len(by_kid) == 1 else None
    return KeySet(algorithm, by_kid, default)


@dataclass(frozen=True, slots=True)
class DevKeys:
    private_pem_path: Path
    public_pem_path: Path


def _write_new(path: Path, data: bytes, mode: int) -> bool:
    """Create ``path`` atomically with ``mode``; False if it already exists (someone won)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # unlike rename, never replaces: a racing `monotape run` keeps its
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)


def _replace(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def ensure_dev_keys(data_dir: str | Path) -> DevKeys:
    """The dev ES256 pair under ``<data_dir>/keys/``: created once (private key 0600, written
    atomically, never overwritten), reused afterwards. The public file is always re-derived
    from the private one, so a half-finished earlier run cannot leave a mismatched pair."""
    directory = Path(data_dir) / "keys"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    private_path, public_path = directory / DEV_PRIVATE, directory / DEV_PUBLIC
    if not private_path.exists():
        pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        if _write_new(private_path, pem, 0o600):
            log_event("auth_dev_keys_created", path=str(private_path))
    if private_path.stat().st_mode & 0o077:
        os.chmod(private_path, 0o600)  # a copied-in key readable by others: tighten it
    private = serialization.load_pem_private_key(private_path.read_bytes(), password=None)
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        current = public_path.read_bytes()
    except FileNotFoundError:
        current = b""
    if current != public_pem:
        _replace(public_path, public_pem, 0o644)
    return DevKeys(private_path, public_path)
