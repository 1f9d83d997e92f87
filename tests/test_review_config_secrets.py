"""Review: `spillguard config check|show` must never print a secret, even part of one."""

from __future__ import annotations

from spillguard.config import Origins, render
from spillguard.settings import Settings


def test_a_password_with_an_at_sign_is_hidden_whole() -> None:
    # yarl (aiohttp) reads the userinfo up to the last '@': the password is "p@ss-tail".
    settings = Settings(upstream="https://user:p@ss-tail@upstream.example/v1")
    shown = render(settings, Origins({}, None))
    assert "ss-tail" not in shown


def test_a_token_as_the_urls_user_is_hidden() -> None:
    settings = Settings(upstream="https://sk-proj-token-in-userinfo@upstream.example/v1")
    shown = render(settings, Origins({}, None))
    assert "sk-proj-token-in-userinfo" not in shown


def test_the_userinfo_is_masked_and_the_rest_of_the_url_kept() -> None:
    settings = Settings(upstream="https://sk-proj-token@upstream.example:8443/v1?region=eu")
    shown = render(settings, Origins({}, None))
    assert 'upstream = "https://***@upstream.example:8443/v1?region=eu"' in shown
    settings = Settings(upstream="https://user:p@ss-tail@upstream.example/v1")
    shown = render(settings, Origins({}, None))
    assert 'upstream = "https://user:***@upstream.example/v1"' in shown
