"""The shapes a response, conversation or prompt template id sent by a client must have."""

from __future__ import annotations

import re

from domain.errors import InvalidRequest

RESPONSE_ID = r"^resp_[A-Za-z0-9_-]{1,128}$"
CONVERSATION_ID = r"^conv_[A-Za-z0-9_-]{1,128}$"
PROMPT_ID = r"^pmpt_[A-Za-z0-9_-]{1,128}$"


def _checked(value: str, pattern: str, prefix: str, param: str) -> str:
    """`value`, if it matches `pattern`; else OpenAI's 400 naming `param` and the prefix."""
    if not re.fullmatch(pattern, value):
        raise InvalidRequest(
            f"Invalid '{param}': '{value[:80]}'. Expected an ID that begins with '{prefix}'.",
            param=param,
            code="invalid_value",
        )
    return value


def check_conversation_id(value: str, *, param: str = "conversation_id") -> str:
    """`value`, if it has a conversation id's shape; else OpenAI's 400 naming `param`."""
    return _checked(value, CONVERSATION_ID, "conv", param)


def check_response_id(value: str, *, param: str = "response_id") -> str:
    """`value`, if it has a response id's shape; else OpenAI's 400 naming `param`."""
    return _checked(value, RESPONSE_ID, "resp", param)


def check_prompt_id(value: str, *, param: str = "prompt.id") -> str:
    """`value`, if it has a prompt template id's shape; else OpenAI's 400 naming `param`."""
    return _checked(value, PROMPT_ID, "pmpt", param)
