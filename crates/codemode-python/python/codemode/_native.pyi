"""Type stubs of the native module (``crates/codemode-python/src/lib.rs``)."""

from typing import Any, Awaitable, Callable, final

__all__ = ["CodeModeError", "Runtime", "shutdown", "start", "parse_config", "version"]

class CodeModeError(Exception):
    """A host API call that could not be made."""

    @property
    def code(self) -> str:
        """``invalid_input``, ``config_error``, ``snapshot_expired``, ``snapshot_limit_exceeded``, …"""
    @property
    def message(self) -> str: ...

@final
class Runtime:
    @property
    def engine(self) -> str: ...
    def exec(
        self,
        code: str,
        language: str | None = None,
        session: str = ...,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        auto_wait: tuple[int, int] | None = None,
    ) -> Awaitable[dict[str, Any]]: ...
    def wait(
        self,
        run_id: str,
        session: str = ...,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        auto_wait: tuple[int, int] | None = None,
    ) -> Awaitable[dict[str, Any]]: ...
    def exec_json(
        self,
        args: dict[str, Any],
        session: str = ...,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        auto_wait: tuple[int, int] | None = None,
    ) -> Awaitable[dict[str, Any]]: ...
    def wait_json(
        self,
        args: dict[str, Any],
        session: str = ...,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        auto_wait: tuple[int, int] | None = None,
    ) -> Awaitable[dict[str, Any]]: ...
    def approve(self, run_id: str, request_id: int, deny: str | None = None) -> Awaitable[None]: ...
    def abort(self, run_id: str) -> Awaitable[bool]: ...
    def export_run(
        self,
        run_id: str,
        session: str = ...,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
    ) -> Awaitable[bytes]: ...
    def import_run(self, data: bytes) -> Awaitable[str]: ...
    def close(self) -> Awaitable[None]: ...
    def model_tools(self) -> list[dict[str, Any]]: ...
    def tool_ids(self) -> list[str]: ...

def start(
    tools: list[tuple[dict[str, Any], Callable[[dict[str, Any], dict[str, Any]], Any], str]],
    config: dict[str, Any] | None = None,
    hook: Callable[[dict[str, Any]], Any] | None = None,
    approver: Callable[[dict[str, Any]], Any] | None = None,
) -> Runtime: ...
def parse_config(text: str) -> dict[str, Any]: ...
def shutdown() -> None: ...
def version() -> str: ...
