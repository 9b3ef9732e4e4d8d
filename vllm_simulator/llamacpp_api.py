"""llama-server b11434's JSON bodies (tools/server/server-context.cpp), reduced to the fields a client reads.

nlohmann::json keeps an object's keys sorted and dumps them compact; its errors are ``{"error": {code, message,
type}}`` with the status the error type maps to (server-common.cpp). Recorded answers: tests/fixtures/real/llamacpp.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Final

from . import openai_api
from .llamacpp_engine import LlamacppOptions

BUILD_INFO: Final = "b11434-unknown"
METRICS_OFF: Final = "This server does not support metrics endpoint. Start it with `--metrics`"
SLOTS_OFF: Final = "This server does not support slots endpoint. Start it with `--slots`"


def dump(payload: Any) -> bytes:
    """``safe_json_to_str``: compact; keys sorted, as nlohmann's std::map-backed objects hold them."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def error(code: int, kind: str, message: str) -> bytes:
    """``format_error_response`` under ``error``: e.g. 501 not_supported_error, 503 unavailable_error."""
    return dump({"error": {"code": code, "message": message, "type": kind}})


#: httplib's answer to a route it does not have (the server's error handler), sent with Connection: close.
NOT_FOUND: Final = b'{"error":{"message":"File Not Found","type":"not_found_error","code":404}}'


def models(model: str, slot_ctx: int) -> dict[str, Any]:
    """``get_res_models``: the Ollama-style list and the OpenAI one, each of the one loaded model."""
    details = {"parent_model": "", "format": "gguf", "family": "", "families": [""], "parameter_size": "",
               "quantization_level": ""}
    ollama = {"name": model, "model": model, "modified_at": "", "size": "", "digest": "", "type": "model",
              "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "", "details": details}
    card = {"id": model, "aliases": [model], "tags": [], "object": "model",
            "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
            "created": int(time.time()), "owned_by": "llamacpp",
            "meta": {"vocab_type": 2, "n_vocab": 969, "n_ctx": slot_ctx, "n_ctx_train": 2048, "n_embd": 128,
                     "n_params": 576384, "size": 2305536, "ftype": "all F32"}}
    return {"models": [ollama], "object": "list", "data": [card]}


def props(model: str, slots: int, options: LlamacppOptions, sleeping: bool) -> dict[str, Any]:
    """``get_res_props``: answered without the model (from a cache while asleep), so it never wakes the server."""
    return {
        "default_generation_settings": {"n_ctx": options.n_ctx, "params": {"n_predict": -1, "temperature": 0.8}},
        "total_slots": slots, "model_alias": model, "model_ftype": "all F32", "model_path": model,
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": options.slots, "endpoint_props": False, "endpoint_metrics": options.metrics, "ui": True,
        "build_info": BUILD_INFO, "is_sleeping": sleeping, "cors_proxy_enabled": False,
    }


def slots(total: int, slot_ctx: int, processing: int, decoded: int, first_task: int) -> list[dict[str, Any]]:
    """GET /slots (a task, like /metrics): each slot; a processing one with its task and what it decoded so far."""
    out: list[dict[str, Any]] = []
    for index in range(total):
        slot: dict[str, Any] = {"id": index, "n_ctx": slot_ctx, "speculative": False,
                                "is_processing": index < processing}
        if index < processing:
            slot.update({"id_task": first_task + index, "n_prompt_tokens": 200, "n_prompt_tokens_processed": 200,
                         "n_prompt_tokens_cache": 0,
                         "next_token": [{"has_next_token": True, "has_new_line": False,
                                         "n_remain": max(0, 100000 - decoded), "n_decoded": decoded}]})
        out.append(slot)
    return out


def completion(request: openai_api.Completion, model: str) -> dict[str, Any]:
    """A served completion in llama-server's OpenAI shape (with its ``timings``), finished by length."""
    text = " ok" * request.max_tokens
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
    if request.chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    usage = {"completion_tokens": request.max_tokens, "prompt_tokens": request.prompt_tokens,
             "total_tokens": request.prompt_tokens + request.max_tokens,
             "prompt_tokens_details": {"cached_tokens": 0}}
    return {"choices": [choice], "created": int(time.time()), "model": model, "system_fingerprint": BUILD_INFO,
            "object": "chat.completion" if request.chat else "text_completion", "usage": usage,
            "id": f"chatcmpl-{uuid.uuid4().hex[:32]}",
            "timings": {"cache_n": 0, "prompt_n": request.prompt_tokens, "predicted_n": request.max_tokens}}
