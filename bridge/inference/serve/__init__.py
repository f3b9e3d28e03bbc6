"""`bridge serve`'s library side: an OpenAI-compatible HTTP server over one model replica (any TP / PP).

The driver rank (engine.py) serves HTTP from a uvicorn thread and runs the Scheduler loop on its main
thread; each step's batch goes to every rank of the replica through the Engine; the other ranks sit in
`Engine.serve_forever()`. `Server(engine, tokenizer, ...)` with `.start()` / `.close()` runs it in the
background (tests, benchmarks, one process); `serve_blocking(...)` is the CLI's form.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from bridge.inference.engine import Engine
from bridge.inference.serve.app import ServeModel, create_app
from bridge.inference.serve.scheduler import Scheduler

__all__ = ["Server"]


class Server:
    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        name: str,
        *,
        eos_token_ids: list[int] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_batch_size: int = 16,
        max_waiting: int = 256,
    ) -> None:
        import uvicorn

        self.engine = engine
        self.scheduler = Scheduler(engine, max_batch_size=max_batch_size, max_waiting=max_waiting)
        served = ServeModel(self.scheduler, tokenizer, name, engine.max_length, list(eos_token_ids or []))
        self.app = create_app(served)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))  # port 0: the OS picks a free one (self.port says which)
        self.host, self.port = self._socket.getsockname()[:2]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
        self._http = uvicorn.Server(config)
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _serve_http(self) -> None:
        self._http.run(sockets=[self._socket])

    def start(self, with_scheduler_thread: bool = True) -> Server:
        """HTTP in a thread (and, for one-rank use, the scheduler loop in another); returns when listening."""
        http = threading.Thread(target=self._serve_http, name="bridge-serve-http", daemon=True)
        http.start()
        self._threads.append(http)
        if with_scheduler_thread:
            loop = threading.Thread(target=self.scheduler.run, name="bridge-serve-loop", daemon=True)
            loop.start()
            self._threads.append(loop)

        deadline = time.monotonic() + 30
        while not self._http.started:
            if time.monotonic() > deadline or not http.is_alive():
                raise RuntimeError("the HTTP server did not start within 30 s")
            time.sleep(0.02)
        return self

    def run_forever(self) -> None:
        """The driver's main thread: the scheduler loop until close() (or Ctrl-C), then the other ranks are released."""
        self.start(with_scheduler_thread=False)
        try:
            self.scheduler.run()
        except KeyboardInterrupt:
            pass
        finally:
            self.close()

    def close(self) -> None:
        self.scheduler.shutdown()
        self._http.should_exit = True
        for t in self._threads:
            t.join(timeout=10)
        self.engine.stop()
        self._socket.close()
