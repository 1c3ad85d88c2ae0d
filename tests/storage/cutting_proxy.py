"""A TCP proxy that forwards 127.0.0.1:LISTEN to 127.0.0.1:TARGET and exits, cutting every
connection, once more than CUT_AFTER bytes went upstream: a link to the store lost in the middle of
an upload, with the store itself still there to be looked at afterwards. With CUT_AFTER 0 it
forwards until it is killed: the store's link, taken away and brought back by the test.

    python tests/storage/cutting_proxy.py LISTEN TARGET CUT_AFTER   # prints "ready"
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading


def main() -> None:
    listen, target, cut_after = (int(a) for a in sys.argv[1:4])
    server = socket.create_server(("127.0.0.1", listen))
    sent = 0
    lock = threading.Lock()

    def pipe(source: socket.socket, sink: socket.socket, upstream: bool) -> None:
        nonlocal sent
        try:
            while data := source.recv(1 << 16):
                if upstream:
                    with lock:
                        sent += len(data)
                        if 0 < cut_after < sent:
                            os._exit(0)  # every connection is reset at once
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    print("ready", flush=True)
    while True:
        client, _ = server.accept()
        store = socket.create_connection(("127.0.0.1", target))
        threading.Thread(target=pipe, args=(client, store, True), daemon=True).start()
        threading.Thread(target=pipe, args=(store, client, False), daemon=True).start()


if __name__ == "__main__":
    main()
