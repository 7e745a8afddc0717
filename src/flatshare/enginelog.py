"""Where vLLM's and torch's start-up chatter goes: quiet by default, `engine.log` in the output folder.

Built in-process, vLLM does not configure its logging (`vllm serve` does), so its warnings (Triton
missing, block sizes the CPU backend prefers, the experimental KV connector API) reach Python's
last-resort handler and print bare on stderr around flatshare's own output. `quiet()` (the root
command's default; `flatshare --verbose` skips it) gives the engine libraries' loggers a handler of
their own that holds their records until a command names its output folder with `log_to(out)`, then
writes them, and every later one, to `out/engine.log` (appended). Records of a command that names no
folder are kept in memory (the last `CAPACITY`) and dropped at exit. Processes forked later (the
experiments' worker pools) inherit the handler. Only logging is configured: stderr stays the
process's, so flatshare's own messages and progress bars show as before.
"""

from __future__ import annotations

import logging
from pathlib import Path

ENGINE_LOGGERS = ("vllm", "torch", "transformers", "py.warnings")
ENGINE_LOG = "engine.log"
CAPACITY = 10_000
_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"


class _EngineLog(logging.Handler):
    """Holds records until a file is named, then writes them there and every later one."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[logging.LogRecord] = []
        self._file: logging.FileHandler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._file is not None:
            self._file.handle(record)
            return
        self._pending.append(record)
        del self._pending[:-CAPACITY]

    def to_file(self, path: Path) -> None:
        if self._file is not None and Path(self._file.baseFilename) == path.resolve():
            return
        if self._file is not None:
            self._file.close()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = logging.FileHandler(path, mode="a", encoding="utf-8", delay=True)
        self._file.setFormatter(logging.Formatter(_FORMAT))
        pending, self._pending = self._pending, []
        for record in pending:
            self._file.handle(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        super().close()


_handler: _EngineLog | None = None


def quiet() -> None:
    """Route the engine libraries' log records (and Python warnings) away from stderr (idempotent).

    Call it before vLLM is imported: vLLM logs while it imports."""
    global _handler
    if _handler is None:
        _handler = _EngineLog()
    logging.captureWarnings(True)
    for name in ENGINE_LOGGERS:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(_handler)
        logger.propagate = False


def log_to(folder: Path) -> None:
    """Write the held engine records, and later ones, to `folder/engine.log` (no-op unless quiet)."""
    if _handler is not None:
        _handler.to_file(folder / ENGINE_LOG)
