"""User settings (control_plane.settings), in-process."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from control_plane.settings import SettingsPatch
from web.errors import from_pydantic


def test_validation_errors_never_echo_secrets() -> None:
    with pytest.raises(ValidationError) as caught:
        SettingsPatch.model_validate({"llm_api_key": 123456789, "secrets": {"bad name": "sk-live"}})
    error = from_pydantic(caught.value, "body")
    assert error.status_code == 422
    text = str(error.errors)
    assert "123456789" not in text and "sk-live" not in text
    assert all(item["loc"][0] == "body" for item in error.errors)
