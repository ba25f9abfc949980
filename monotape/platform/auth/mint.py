"""Minting tokens: ``mint_token`` and the ``monotape token`` command.

``TOKEN=$(monotape token --sub alice)`` works because only the token goes to stdout; errors go
to stderr and exit 2 naming the flag, like every monotape command.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import jwt
from cryptography.hazmat.primitives import serialization

from monotape.platform.auth.keys import ALGORITHMS, KeyFileError, ensure_dev_keys

if TYPE_CHECKING:
    from monotape.config import AuthConfig

__all__ = ["add_token_arguments", "mint_token", "parse_ttl", "run_token"]

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_TTL: Final = re.compile(r"(\d+)([smhd]?)")
MAX_TTL_S: Final = 366 * 86_400  # a year: past that it is a credential, not a session token


def parse_ttl(text: str) -> int:
    """``90s``, ``15m``, ``8h``, ``1d`` (or bare seconds) to seconds; ValueError otherwise."""
    match = _TTL.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"expected a duration like 90s, 15m, 8h or 1d, got {text!r}")
    seconds = int(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not 0 < seconds <= MAX_TTL_S:
        raise ValueError(f"must be between 1s and {MAX_TTL_S // 86_400}d, got {text!r}")
    return seconds


def mint_token(
    private_key_path: str | Path,
    *,
    sub: str,
    ttl_s: float,
    admin: bool = False,
    aud: str = "monotape",
    iss: str = "monotape-dev",
    alg: str = "ES256",
    kid: str | None = None,
    now: float | None = None,
) -> str:
    """A signed JWT for ``sub``, valid from ``now`` (wall seconds; default the real clock)
    for ``ttl_s``. ``admin`` sets the boolean ``adm`` claim the admin API checks."""
    if alg not in ALGORITHMS:
        raise ValueError(f"alg must be one of {', '.join(sorted(ALGORITHMS))}")
    if not sub:
        raise ValueError("sub must not be empty")
    try:
        key = serialization.load_pem_private_key(Path(private_key_path).read_bytes(), None)
    except OSError as exc:
        raise KeyFileError(f"{private_key_path}: {exc.strerror}") from exc
    except (ValueError, TypeError):
        raise KeyFileError(f"{private_key_path}: not an unencrypted PEM private key") from None
    issued = int(time.time() if now is None else now)
    payload: dict[str, Any] = {
        "sub": sub,
        "aud": aud,
        "iss": iss,
        "iat": issued,
        "exp": issued + int(ttl_s),
        "adm": admin,
    }
    headers = {"kid": kid} if kid else None
    return jwt.encode(payload, key, algorithm=alg, headers=headers)  # type: ignore[arg-type]


def add_token_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sub", required=True, help="the subject: a trader or service name")
    parser.add_argument("--ttl", default="15m", help="lifetime: 90s, 15m, 8h, 1d (default 15m)")
    parser.add_argument("--admin", action="store_true", help="grant the admin API (adm claim)")
    parser.add_argument("--aud", help="audience (default: auth.audience, 'monotape')")
    parser.add_argument("--iss", help="issuer (default: auth.issuer, 'monotape-dev')")
    parser.add_argument("--key", help="PEM private key (default: the dev key in the data dir)")
    parser.add_argument("--alg", help="signing algorithm (default: auth.algorithm, ES256)")
    parser.add_argument("--kid", help="key id header, to pick a key from a JWKS")


def run_token(args: argparse.Namespace, data_dir: str, auth: AuthConfig | None = None) -> int:
    """Print one token on stdout; 0, or 2 on a bad flag (the message names it)."""

    def fail(message: str) -> int:
        print(f"monotape token: error: {message}", file=sys.stderr)
        return 2

    try:
        ttl_s = parse_ttl(args.ttl)
    except ValueError as exc:
        return fail(f"--ttl: {exc}")
    if not args.sub:
        return fail("--sub: must not be empty")
    alg = args.alg or (auth.algorithm if auth else "ES256")
    if alg not in ALGORITHMS:
        return fail(f"--alg: must be one of {', '.join(sorted(ALGORITHMS))}")
    if args.key:
        key_path = Path(args.key)
    elif alg == "ES256":
        key_path = ensure_dev_keys(data_dir).private_pem_path
    else:
        return fail(f"--key: the dev key is ES256; {alg} needs --key")
    try:
        token = mint_token(
            key_path,
            sub=args.sub,
            ttl_s=ttl_s,
            admin=bool(args.admin),
            aud=args.aud or (auth.audience if auth else "monotape"),
            iss=args.iss or (auth.issuer if auth else "monotape-dev"),
            alg=alg,
            kid=args.kid,
        )
    except KeyFileError as exc:
        return fail(f"--key: {exc}")
    except (ValueError, TypeError, jwt.PyJWTError) as exc:  # e.g. an RSA key for ES256
        return fail(f"--key: cannot sign {alg} with {key_path}: {type(exc).__name__}")
    print(token)
    return 0
