"""Servicer plumbing, the one wrapper every gRPC service uses: a handler answers with an error code and
Kafka's message (no "[NAME] " prefix on the wire), never with a gRPC error or a traceback."""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from proto.errors import KafkaError, UnknownServerError, code_of

log = logging.getLogger(__name__)
S = TypeVar("S")  # the servicer
Q = TypeVar("Q")  # the request
R = TypeVar("R")  # the response


def wire_message(error: KafkaError | str) -> str:
    """An error's message as it goes on the wire: without its "[NAME] " prefix, as Kafka sends it; the
    client's for_code() puts the name back from the code."""
    text = str(error)
    if text.startswith("[") and "] " in text:
        name, rest = text[1:].split("] ", 1)
        if name.isupper() or "_" in name:
            return rest
    return text


def answer(handler: Callable[[Q], R], request: Q, response_type: Callable[..., R]) -> R:
    """`handler(request)`, with a KafkaError (or an unexpected exception, logged) turned into
    `response_type(error_code, error_message)`: no handler ever ends in a gRPC error or a traceback."""
    try:
        return handler(request)
    except KafkaError as exc:
        return response_type(error_code=code_of(exc), error_message=wire_message(exc))
    except Exception as exc:  # a node bug: answer, log, keep serving
        log.exception("%s failed", getattr(handler, "__name__", handler))
        return response_type(error_code=UnknownServerError.errno, error_message=f"{type(exc).__name__}: {exc}")


def answers_with(response_type: Callable[..., R]) -> Callable[[Callable[[S, Q, Any], R]], Callable[[S, Q, Any], R]]:
    """The decorator form of `answer` for servicer methods `(self, request, context) -> response`."""
    def decorate(handler: Callable[[S, Q, Any], R]) -> Callable[[S, Q, Any], R]:
        @functools.wraps(handler)
        def wrapper(self: S, request: Q, context: Any = None) -> R:
            return answer(lambda req: handler(self, req, context), request, response_type)
        return wrapper
    return decorate
