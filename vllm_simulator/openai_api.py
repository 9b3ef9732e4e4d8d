"""The OpenAI-compatible side of the wire: request validation, token counting and response bodies.

Plain functions from parsed JSON to parsed JSON, kept apart from the socket code so the HTTP handler only routes.
The shapes follow vLLM's OpenAI server closely enough for the check's probe and for the tests that read them.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Final

MAX_MODEL_LEN: Final = 2048
DEFAULT_MAX_TOKENS: Final = 16
#: The routes that are inference (the request log's ``inference_requests()`` keeps only these POSTs).
INFERENCE_PATHS: Final = frozenset({"/v1/completions", "/v1/chat/completions"})


@dataclass(frozen=True)
class Completion:
    """A valid completion request, reduced to what the engine accounts."""

    chat: bool
    prompt_tokens: int
    max_tokens: int


@dataclass(frozen=True)
class ApiError:
    """An OpenAI-style error to answer instead of a completion."""

    status: int
    kind: str
    message: str


def count_prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    """Whitespace-split token count of the prompt (or chat messages), at least 1."""
    texts: list[str] = []
    ids = 0
    if chat:
        messages = body.get("messages")
        if isinstance(messages, list):
            for message in messages:
                content = message.get("content") if isinstance(message, dict) else None
                if isinstance(content, str):
                    texts.append(content)
                elif isinstance(content, list):
                    texts.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            texts.append(prompt)
        elif isinstance(prompt, list):
            for item in prompt:
                if isinstance(item, str):
                    texts.append(item)
                elif isinstance(item, int):
                    ids += 1
                elif isinstance(item, list):
                    ids += len(item)
    words = sum(len(text.split()) for text in texts)
    return max(1, words + ids)


def parse_completion(body: object, chat: bool, model: str) -> Completion | ApiError:
    """Validate a decoded request body as vLLM would, for the served ``model``."""
    if not isinstance(body, dict):
        return ApiError(400, "BadRequestError", "Request body must be a JSON object.")
    asked = body.get("model")
    if asked is not None and asked != model:
        return ApiError(404, "NotFoundError", f"The model `{asked}` does not exist.")
    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return ApiError(400, "BadRequestError", "max_tokens must be at least 1.")
    return Completion(chat, count_prompt_tokens(body, chat), max_tokens)


def error_payload(error: ApiError, legacy: bool) -> dict[str, Any]:
    """The error body; V0 servers put the fields at the top level, current ones under ``error``."""
    fields = {"message": error.message, "type": error.kind, "param": None, "code": error.status}
    return {"object": "error", **fields} if legacy else {"error": fields}


def completion_payload(request: Completion, model: str) -> dict[str, Any]:
    """A served completion: `` ok`` once per requested token, finished by length."""
    text = " ok" * request.max_tokens
    usage = {
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": request.max_tokens,
        "total_tokens": request.prompt_tokens + request.max_tokens,
    }
    payload: dict[str, Any]
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length", "stop_reason": None}
    if request.chat:
        choice["message"] = {"role": "assistant", "content": text}
        payload = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion"}
    else:
        choice["text"] = text
        payload = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion"}
    payload.update({"created": int(time.time()), "model": model, "choices": [choice], "usage": usage})
    return payload


def models_payload(model: str, created: float) -> dict[str, Any]:
    """``GET /v1/models``: the one served model, created when the process started."""
    return {
        "object": "list",
        "data": [{
            "id": model,
            "object": "model",
            "created": int(created),
            "owned_by": "vllm",
            "root": model,
            "parent": None,
            "max_model_len": MAX_MODEL_LEN,
        }],
    }
