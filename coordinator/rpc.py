"""Servicer plumbing: every handler answers with an error code, never with a gRPC error or a traceback."""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from proto.errors import KafkaError, UnknownServerError, code_of

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def answers_with(response_type: type) -> Callable[[F], F]:
    """Turn a KafkaError (or an unexpected exception) into `response_type(error_code, error_message)`."""
    def decorate(handler: F) -> F:
        @functools.wraps(handler)
        def wrapper(self: Any, request: Any, context: Any = None) -> Any:
            try:
                return handler(self, request, context)
            except KafkaError as exc:
                return response_type(error_code=code_of(exc), error_message=str(exc))
            except Exception as exc:  # a node bug: answer, log, keep serving
                log.exception("%s failed", handler.__name__)
                return response_type(error_code=UnknownServerError.errno,
                                     error_message=f"[UNKNOWN_SERVER_ERROR] {type(exc).__name__}: {exc}")
        return wrapper  # type: ignore[return-value]
    return decorate
