"""Servicer plumbing, the one wrapper every gRPC service uses: a handler answers with an error code and
Kafka's message (no "[NAME] " prefix on the wire), never with a gRPC error or a traceback."""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from proto.errors import KafkaError, UnknownServerError, code_of

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def wire_message(error: KafkaError | str) -> str:
    """An error's message as it goes on the wire: without its "[NAME] " prefix, as Kafka sends it; the
    client's for_code() puts the name back from the code."""
    text = str(error)
    if text.startswith("[") and "] " in text:
        name, rest = text[1:].split("] ", 1)
        if name.isupper() or "_" in name:
            return rest
    return text


def answer(handler: Callable[[Any], Any], request: Any, response_type: Callable[..., Any]) -> Any:
    """`handler(request)`, with a KafkaError (or an unexpected exception, logged) turned into
    `response_type(error_code, error_message)`: no handler ever ends in a gRPC error or a traceback."""
    try:
        return handler(request)
    except KafkaError as exc:
        return response_type(error_code=code_of(exc), error_message=wire_message(exc))
    except Exception as exc:  # a node bug: answer, log, keep serving
        log.exception("%s failed", getattr(handler, "__name__", handler))
        return response_type(error_code=UnknownServerError.errno, error_message=f"{type(exc).__name__}: {exc}")


def answers_with(response_type: type) -> Callable[[F], F]:
    """The decorator form of `answer` for servicer methods."""
    def decorate(handler: F) -> F:
        @functools.wraps(handler)
        def wrapper(self: Any, request: Any, context: Any = None) -> Any:
            return answer(lambda req: handler(self, req, context), request, response_type)
        return wrapper  # type: ignore[return-value]
    return decorate
