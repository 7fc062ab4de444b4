"""`--audit-view` resolved against the bind (adapters/cli/access_flags.py): the log holds
every prompt, so `auto` shows it on a loopback bind only, and `key` needs a key."""

from __future__ import annotations

import pytest

from adapters.cli.access_flags import audit_settings
from domain.errors import ResplogError


@pytest.mark.parametrize(
    ("host", "mode", "key", "want"),
    [
        ("127.0.0.1", "auto", None, "open"),
        ("::1", "auto", None, "open"),
        ("localhost", "auto", "k", "open"),
        ("0.0.0.0", "auto", None, "off"),
        ("0.0.0.0", "auto", "k", "off"),  # a key alone does not expose it: ask for `key`
        ("0.0.0.0", "open", None, "open"),
        ("0.0.0.0", "key", "k", "key"),
        ("127.0.0.1", "off", None, "off"),
    ],
)
def test_auto_is_open_on_loopback_only(host: str, mode: str, key: str | None, want: str) -> None:
    assert audit_settings(host, mode, key)["audit_view"] == want


def test_key_mode_without_a_key_is_refused() -> None:
    with pytest.raises(ResplogError, match="--audit-key"):
        audit_settings("0.0.0.0", "key", None)
