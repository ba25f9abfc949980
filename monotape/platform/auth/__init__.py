"""Auth on the WebSocket upgrade and the admin API (design: Connections: Auth; docs/auth.md).

- ``verifier``: ``TokenVerifier`` (off-loop verification, fingerprint LRU).
- ``tokens``: what needs no key: ``AuthError`` and its reasons, ``Claims``, ``Prechecked``,
  ``token_from_request``, ``www_authenticate`` (``verifier`` re-exports them).
- ``keys``: key sets built once (PEM or JWKS), the dev key pair.
- ``mint``: ``mint_token`` and the ``monotape token`` command.

Its settings (``AuthConfig``) live in ``monotape.config`` with the rest of the configuration:
auth imports config, never the reverse.
"""

from __future__ import annotations

from pathlib import Path

from monotape.clock import Clock
from monotape.config import AuthConfig, ConfigError
from monotape.platform.auth.keys import (
    ALGORITHMS,
    DevKeys,
    KeyFileError,
    KeySet,
    ensure_dev_keys,
    load_jwks,
    load_public_pem,
)
from monotape.platform.auth.mint import add_token_arguments, mint_token, parse_ttl, run_token
from monotape.platform.auth.verifier import (
    REASONS,
    AuthError,
    Claims,
    TokenVerifier,
    token_from_request,
    www_authenticate,
)

__all__ = [
    "ALGORITHMS",
    "REASONS",
    "AuthError",
    "Claims",
    "DevKeys",
    "KeyFileError",
    "KeySet",
    "TokenVerifier",
    "add_token_arguments",
    "build_verifier",
    "ensure_dev_keys",
    "load_jwks",
    "load_public_pem",
    "mint_token",
    "parse_ttl",
    "run_token",
    "token_from_request",
    "www_authenticate",
]


def build_verifier(
    cfg: AuthConfig,
    data_dir: str | Path,
    *,
    clock: Clock | None = None,
) -> TokenVerifier:
    """Build the key set once and the verifier around it. Raises ``monotape.config.ConfigError``
    naming the ``auth.*`` field on a bad algorithm, key file, JWKS or limit, so ``monotape run``
    fails at start (exit 2), never at the first upgrade. Call ``close()`` at shutdown."""
    if cfg.algorithm not in ALGORITHMS:
        raise ConfigError(f"auth.algorithm: must be one of {', '.join(sorted(ALGORITHMS))}")
    for name, value in (
        ("cache_size", cfg.cache_size),
        ("max_token_bytes", cfg.max_token_bytes),
        ("verify_threads", cfg.verify_threads),
    ):
        if value < (0 if name == "cache_size" else 1):
            raise ConfigError(f"auth.{name}: must be positive, got {value}")
    if cfg.leeway_s < 0:
        raise ConfigError(f"auth.leeway_s: must be >= 0, got {cfg.leeway_s}")
    try:
        if cfg.jwks_file:
            keys = load_jwks(cfg.jwks_file, cfg.algorithm)
        elif cfg.public_key_file:
            keys = load_public_pem(cfg.public_key_file, cfg.algorithm)
        elif cfg.algorithm == "ES256":
            keys = load_public_pem(ensure_dev_keys(data_dir).public_pem_path, "ES256")
        else:
            raise KeyFileError(f"{cfg.algorithm} needs auth.public_key_file or auth.jwks_file")
    except KeyFileError as exc:
        field = "jwks_file" if cfg.jwks_file else "public_key_file"
        raise ConfigError(f"auth.{field}: {exc}") from exc
    return TokenVerifier(
        keys,
        audience=cfg.audience,
        issuer=cfg.issuer,
        leeway_s=cfg.leeway_s,
        cache_size=cfg.cache_size,
        max_token_bytes=cfg.max_token_bytes,
        verify_threads=cfg.verify_threads,
        clock=clock,
    )
