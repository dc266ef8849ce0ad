"""Answers to come: chaining concurrent.futures so a request that waits (a long poll, a held JoinGroup) is a
future the front door completes its answer from, rather than a thread blocked until it is ready."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")
U = TypeVar("U")


def answered(value: T) -> Future[T]:
    """A future that is already done."""
    future: Future[T] = Future()
    future.set_result(value)
    return future


def then(future: Future[T], fn: Callable[[T], U]) -> Future[U]:
    """`fn` of the future's result, once it has one (on the thread that completes it); an exception, from the
    future or from `fn`, passes through."""
    out: Future[U] = Future()

    def chain(done: Future[T]) -> None:
        error = done.exception()
        if error is not None:
            out.set_exception(error)
            return
        try:
            out.set_result(fn(done.result()))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on `out`
            out.set_exception(exc)

    future.add_done_callback(chain)
    return out
