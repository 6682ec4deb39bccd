"""A flood ban holds for the flooder's CURVE key, not for its socket: a client floods a CURVE broker
until the broker drops it, then comes back on a new socket with the same key (unanswered), while a
client with another key is served.

Usage: flood_per_key.py ENDPOINT SERVER_KEY
"""
import json
import sys
import time

import zmq

from flooding import flood_until_dropped

endpoint, server_key = sys.argv[1], sys.argv[2]
context = zmq.Context()
flooder_keys = zmq.curve_keypair()


def connect(keys):
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.curve_serverkey = server_key.encode()
    socket.curve_publickey, socket.curve_secretkey = keys
    socket.connect(endpoint)
    return socket


def listed(socket, tag, wait_ms):
    """Sends LIST with id `tag`; whether an answer with that id comes within wait_ms."""
    socket.send_multipart([b"TESSERA/1", b"\x22", json.dumps({"id": tag}).encode()])
    deadline = time.monotonic() + wait_ms / 1000.0
    while time.monotonic() < deadline:
        if socket.poll(int(max(1, (deadline - time.monotonic()) * 1000))):
            if json.loads(socket.recv_multipart()[2]).get("id") == tag:
                return True
    return False


# The same key is served first (on a loaded machine a CURVE handshake can take a while).
first = connect(flooder_keys)
assert listed(first, "hello", 60000), "the broker never answered"
first.close()

# Flood until the broker falls silent for 3 s (it dropped the peer), as hostile_client.py does.
flood = connect(flooder_keys)
sent, seconds = flood_until_dropped(flood)
flood.close()
print("flooded with %d messages in %.1f s until the broker dropped the key" % (sent, seconds))

# A new socket with the same key: still banned. Another key: served.
again = connect(flooder_keys)
assert not listed(again, "polite", 3000), "a new socket with the flooder's key was served during its ban"
again.close()
print("a new socket with the same key: unanswered")
other = connect(zmq.curve_keypair())
assert listed(other, "other", 60000), "a client with another key was not served"
other.close()
print("a client with another key: served")
