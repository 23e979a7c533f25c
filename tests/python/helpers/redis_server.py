"""A redis-server of the test's own on a loopback port (Debian's, installed by scripts/setup;
never the system service), and free loopback ports for servers and ZeroMQ endpoints."""
import socket
import subprocess
import time


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """redis-server on 127.0.0.1:`port` (a free one by default) with no persistence, plus `extra`
    command-line arguments. Raises RuntimeError when it does not answer PING within 10 s, and
    FileNotFoundError when redis-server is not installed."""

    def __init__(self, port=None, *extra):
        self.port = port or free_port()
        self.extra = extra
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", *map(str, self.extra)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.time() + 10
        while time.time() < end:
            if self.cli("PING").strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def cli(self, *args, stdin=None):
        """redis-cli's stdout for one command (bytes `stdin` piped in, if any)."""
        r = subprocess.run(["redis-cli", "-p", str(self.port), *map(str, args)], input=stdin,
                           capture_output=True, timeout=10)
        return r.stdout.decode(errors="replace")

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)

    def url(self):
        """The --cache-store URL of this server."""
        return f"redis://127.0.0.1:{self.port}"
