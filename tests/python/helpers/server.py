"""`mnemo serve` as the end-to-end tests run it, and checks on a running server."""
import re
import signal
import subprocess
import threading

import requests


class Server:
    """A `mnemo serve` process on a free loopback port (`--port 0`, the port read from its log),
    with `threads` compute threads; stderr (the request log) is collected by a thread. `model`
    None: no -m (router mode, with --models-dir / --models-preset among `args`).

    Raises RuntimeError with the log when the server does not report its port within
    `start_timeout` seconds (a sanitizer build starts slowly).
    """

    def __init__(self, binary, model, *args, threads=2, env=None, preexec_fn=None,
                 start_timeout=120):
        self.proc = subprocess.Popen(
            [str(binary), "serve", *(["-m", str(model)] if model is not None else []),
             "--port", "0", "-t", str(threads), *map(str, args)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
            preexec_fn=preexec_fn)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        ready.wait(start_timeout)
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "\n".join(self.lines))
        self.url = f"http://127.0.0.1:{self.port}"

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        return "\n".join(self.lines)

    def stop(self, timeout=30):
        """SIGTERM; returns the exit code (the server shuts down cleanly), or None when it had
        to be killed after `timeout` seconds."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def stop(srv):
    """SIGTERM: the server must still be alive and exit cleanly."""
    assert srv.alive(), srv.log()
    assert srv.stop() == 0, srv.log()


def metric(srv, name, labels=""):
    """The value of mnemo_<name><labels> on /metrics (labels as written there, e.g.
    '{slot="0"}'); fails when the server does not report it."""
    text = requests.get(srv.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f"mnemo_{name}{labels} "):
            return float(line.split()[-1])
    raise AssertionError(f"mnemo_{name}{labels} not in /metrics:\n{text}")
