"""core.masking: secrets hidden by value in text, and by key in settings-like data."""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import Any

import pytest

from core.masking import MASK, MIN_LENGTH, REDACTED, Masker, check_secrets, encoded_forms, redact


def test_a_secret_is_masked_wherever_it_appears() -> None:
    masker = Masker({"TOKEN": "tok-12345"})
    assert masker.text("token=tok-12345; again tok-12345") == f"token={MASK}; again {MASK}"
    data = {"tok-12345": ["x tok-12345", 3, None]}
    assert masker.data(data) == {"tok-12345": [f"x {MASK}", 3, None]}  # keys are not text


def test_its_json_form_is_masked_too() -> None:
    secret = 'pa"ss\\word'
    arguments = json.dumps({"command": f"login {secret}"})
    assert secret not in json.loads(Masker({"P": secret}).text(arguments))["command"]
    assert MASK in Masker({"P": secret}).text(arguments)


def test_the_longer_of_two_overlapping_secrets_is_masked_whole() -> None:
    masker = Masker({"SHORT": "abcd", "LONG": "abcdefgh"})
    assert masker.text("abcdefgh") == MASK


def test_values_too_short_to_mask_are_left_alone() -> None:
    short = "x" * (MIN_LENGTH - 1)
    masker = Masker({"PIN": short})
    assert not masker and masker.text(f"pin {short}") == f"pin {short}"


def test_a_secret_added_later_is_masked_from_then_on() -> None:
    live: dict[str, str] = {}
    masker = Masker(live)
    assert masker.text("new-secret") == "new-secret"
    live["NEW"] = "new-secret"
    assert masker.text("new-secret") == MASK


def test_a_secret_split_between_pieces_of_a_stream_is_masked_whole() -> None:
    stream = Masker({"K": "hunter2-topsecret"}).stream()
    pieces = ["the token is hun", "ter2-top", "secret ok", " and hu"]
    shown = "".join(stream.feed(p) for p in pieces) + stream.flush()
    assert shown == f"the token is {MASK} ok and hu"


def test_text_cut_mid_secret_loses_the_start_of_the_secret() -> None:
    masker = Masker({"K": "hunter2-topsecret"})
    assert masker.without_partial_tail("output: hunter2-to") == "output: "
    assert masker.without_partial_tail("output: done") == "output: done"


def test_redact_masks_secret_keys_and_keeps_secret_names() -> None:
    settings: dict[str, Any] = {
        "llm": {"model": "gpt", "api_key": "sk-1"},
        "secrets": {"DEPLOY": "v1", "OTHER": "v2"},
        "servers": [{"token": "t", "password": ""}],
        "session_api_key": None,
    }
    assert redact(settings) == {
        "llm": {"model": "gpt", "api_key": REDACTED},
        "secrets": {"DEPLOY": REDACTED, "OTHER": REDACTED},
        "servers": [{"token": REDACTED, "password": ""}],  # unset stays visibly unset
        "session_api_key": None,
    }
    assert settings["llm"]["api_key"] == "sk-1"  # a copy: the original is untouched


def test_check_secrets_names_each_problem() -> None:
    problems = check_secrets({"GOOD": "long-enough", "bad-name": "long-enough", "SHORT": "abc"})
    assert [name for name, _ in problems] == ["bad-name", "SHORT"]
    assert check_secrets({"GOOD": "long-enough"}) == []


# -- encoded forms (issue 16) ----------------------------------------------------------------

SECRET = "ghp_0123456789abcdefXYZ"


def shown(text: str) -> str:
    return Masker({"TOKEN": SECRET}).text(text)


@pytest.mark.parametrize("prefix", [b"", b"a", b"ab", b"token: "])
@pytest.mark.parametrize("suffix", [b"", b"\n", b"x"])
def test_base64_of_a_secret_is_masked_at_any_alignment(prefix: bytes, suffix: bytes) -> None:
    data = prefix + SECRET.encode() + suffix
    for encoded in (
        base64.b64encode(data).decode(),
        base64.urlsafe_b64encode(data).decode(),
        base64.b64encode(data).decode().rstrip("="),
    ):
        out = shown(f"out: {encoded} end")
        assert MASK in out and encoded[4:-4] not in out, encoded


def test_hex_and_url_encodings_are_masked() -> None:
    for encoded in (
        SECRET.encode().hex(),
        SECRET.encode().hex().upper(),
        urllib.parse.quote("pa ss/word+1"),
        urllib.parse.quote_plus("pa ss/word+1"),
    ):
        value = SECRET if "pa" not in encoded else "pa ss/word+1"
        assert Masker({"K": value}).text(f"[{encoded}]") == f"[{MASK}]", encoded


def test_what_is_not_caught_is_documented() -> None:
    assert "reversed" in (encoded_forms.__doc__ or "")
    assert shown(SECRET[::-1]) == SECRET[::-1]  # reversed: not caught, as documented


def test_a_short_secret_s_encodings_are_not_masked_but_the_value_is() -> None:
    masker = Masker({"PIN": "abcd"})
    assert masker.text(base64.b64encode(b"abcd").decode()) == "YWJjZA=="
    assert masker.text("abcd") == MASK


def test_an_encoded_secret_split_between_stream_pieces_is_masked_whole() -> None:
    encoded = base64.b64encode(SECRET.encode()).decode()
    stream = Masker({"K": SECRET}).stream()
    half = len(encoded) // 2
    out = stream.feed("a " + encoded[:half]) + stream.feed(encoded[half:] + " b") + stream.flush()
    assert encoded[:-2] not in out and MASK in out


def test_a_long_secret_is_masked_in_every_form() -> None:
    """A key file or a service account's JSON runs to kilobytes (the agent server takes 64 KiB):
    masking it builds no pattern as deep as the value is long."""
    secret = "-----BEGIN KEY-----" + "k3Y/+" * 13_000 + "-----END KEY-----"
    masker = Masker({"KEY": secret})
    text = f"a {secret} b {base64.b64encode(secret.encode()).decode()} c"
    masked = masker.text(text)
    assert masked.startswith(f"a {MASK} b {MASK}") and len(masked) < 60  # (base64's end bits)
