"""Credentials the SDK uses, shared with the ``berth`` CLI.

The CLI's ``berth configure PROFILE --token T [--url U]`` (and ``berth up``)
write ``~/.berth/config.json``::

    {"profiles": {"default": {"url": "...", "token": "..."}}}

``SERVICE_TOKEN`` and ``BERTH_URL`` override the profile; ``BERTH_PROFILE``
names the profile (``default`` otherwise); ``BERTH_CONFIG`` moves the file.
"""

import json
import os
from dataclasses import dataclass
from typing import Mapping, Optional

DEFAULT_URL = "http://127.0.0.1:8420"


class ConfigError(Exception):
    """The configuration file exists but cannot be read."""


@dataclass(frozen=True)
class Credentials:
    url: str
    token: Optional[str]
    profile: str


def config_path(env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    if env.get("BERTH_CONFIG"):
        return env["BERTH_CONFIG"]
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".berth", "config.json")


def read_profiles(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    try:
        with open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    profiles = data.get("profiles") if isinstance(data, dict) else None
    return profiles if isinstance(profiles, dict) else {}


def current_credentials(token: str = "", env: Optional[Mapping[str, str]] = None) -> Credentials:
    """The URL and token in effect: an explicit token, then SERVICE_TOKEN, then the profile."""
    env = os.environ if env is None else env
    profile_name = env.get("BERTH_PROFILE") or "default"
    profile = read_profiles(config_path(env)).get(profile_name) or {}
    tok = token or env.get("SERVICE_TOKEN") or profile.get("token") or None
    url = env.get("BERTH_URL") or profile.get("url") or DEFAULT_URL
    return Credentials(url=url.rstrip("/"), token=tok, profile=profile_name)
