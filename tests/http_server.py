"""`Server`: an `app.serve` app on a free loopback port, in a uvicorn thread, for tests."""

from __future__ import annotations

import threading
import time

import uvicorn

from app.serve import build_app
from app.tools.screenshot import free_port


class Server:
    def __init__(self, engine, **kw) -> None:
        self.engine = engine
        self.port = free_port()
        config = uvicorn.Config(build_app(engine, **kw), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:  # uvicorn sets it once the socket listens
            assert self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
